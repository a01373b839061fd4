//! IPC frames: any bytes decode to a message, "need more", or an error; never a panic or a hang.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    use service_ipc::codec::decode_frame;
    let _ = decode_frame::<service_ipc::ToWorker>(data, service_ipc::MAX_FRAME_LEN);
    let _ = decode_frame::<service_ipc::ToSupervisor>(data, 4096);
});

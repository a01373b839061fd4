//! HTTP request bodies: the typed bodies of the API deserialise or fail; never a panic.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<service_ipc::Task>(data);
    let _ = serde_json::from_slice::<service_ipc::TurnOverrides>(data);
    let _ = serde_json::from_slice::<service_ipc::ApprovalDecision>(data);
    let _ = serde_json::from_slice::<service_ipc::EventMsg>(data);
});

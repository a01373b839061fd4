//! Property tests of the frame codec: no input makes it panic, and messages round-trip.

use bytes::BytesMut;
use proptest::prelude::*;
use service_ipc::codec::{decode_frame, encode_frame};
use service_ipc::*;
use tokio_util::codec::Decoder;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = decode_frame::<ToWorker>(&bytes, MAX_FRAME_LEN);
        let _ = decode_frame::<ToSupervisor>(&bytes, 1024);
        let mut buf = BytesMut::from(&bytes[..]);
        let mut codec = FrameCodec::<ToSupervisor, ToWorker>::new();
        while let Ok(Some(_)) = codec.decode(&mut buf) {}
        let _ = codec.decode_eof(&mut buf);
    }

    #[test]
    fn a_valid_header_with_garbage_payload_is_an_error(payload in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&payload);
        // Either garbage (an error) or, rarely, a valid message: never a panic, never more than the frame consumed.
        if let Ok(Some((_, used))) = decode_frame::<ToWorker>(&frame, MAX_FRAME_LEN) {
            prop_assert_eq!(used, frame.len());
        }
    }

    #[test]
    fn commands_and_deltas_round_trip(command in ".*", cwd in proptest::option::of(".*"), delta in ".*") {
        let msg = ToWorker::RunCommand { exec_id: "e".into(), command, cwd };
        let frame = encode_frame(&msg, MAX_FRAME_LEN).unwrap();
        let (back, _): (ToWorker, usize) = decode_frame(&frame, MAX_FRAME_LEN).unwrap().unwrap();
        prop_assert_eq!(back, msg);
        let ev = ToSupervisor::Event(EventPayload::AgentMessageDelta { turn_id: "t".into(), delta });
        let frame = encode_frame(&ev, MAX_FRAME_LEN).unwrap();
        let (back, _): (ToSupervisor, usize) = decode_frame(&frame, MAX_FRAME_LEN).unwrap().unwrap();
        prop_assert_eq!(back, ev);
    }

    #[test]
    fn every_prefix_of_a_frame_is_incomplete_not_an_error(prompt in ".{0,200}") {
        let msg = ToWorker::RunTurn {
            turn_id: "t".into(),
            task: Task::new(prompt),
            context: TurnContext {
                cwd: "/w".into(),
                model: ModelRef { provider: "p".into(), name: "n".into(), config: None },
                sandbox_mode: SandboxMode::ReadOnly,
                instructions: Vec::new(),
                approval_policy: None,
                metadata: None,
            },
            first_reply: None,
        };
        let frame = encode_frame(&msg, MAX_FRAME_LEN).unwrap();
        for cut in 0..frame.len() {
            prop_assert!(matches!(decode_frame::<ToWorker>(&frame[..cut], MAX_FRAME_LEN), Ok(None)));
        }
    }
}

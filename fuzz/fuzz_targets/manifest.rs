//! Manifests, agent.yaml and scripted-provider scripts: any text parses or gives an error; never a panic.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = service_supervisor::bundle::Manifest::parse(text);
        let _ = service_supervisor::bundle::AgentSpec::parse(text);
    }
});

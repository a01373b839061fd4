//! Bundle references: any string parses or gives an error, and a parsed store name is safe as a path component.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(service_supervisor::bundle::BundleRef::Installed { namespace, name, .. }) =
            service_supervisor::bundle::BundleRef::parse(text)
        {
            for part in [namespace, name] {
                assert!(!part.contains('/') && part != ".." && part != "." && !part.is_empty());
            }
        }
    }
});

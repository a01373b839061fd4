//! Walking an error's causes. `std::io::Error::source()` skips the error it wraps, and that is where TLS stacks and
//! body limits put theirs, so a plain `source()` walk misses the cause that says what to do.

use std::error::Error;

/// `e` and every error under it, outermost first, looking inside `std::io::Error`s.
pub fn causes<'a>(e: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(e), |&e| match e.downcast_ref::<std::io::Error>() {
        Some(io) => match io.get_ref() {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => io.source(),
        },
        None => e.source(),
    })
}

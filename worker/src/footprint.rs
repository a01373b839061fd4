//! What an idle worker gives back to the kernel. There is one worker per session and most of them sit idle between
//! turns, so the memory a turn touched and no longer uses is multiplied by the sessions: the allocator's free
//! pages, and the pages of the main thread's stack below the idle loop (a turn's deepest calls reach tens of KiB
//! further down than the loop ever does). Both are given back on every heartbeat; the next turn faults them in
//! again, zeroed, as it would a new process's.

/// Stack kept below the caller's frame: room for the calls this module makes and for a signal handler.
const STACK_MARGIN: usize = 16 * 1024;

/// How far below the caller's frame unused stack is looked for; the kernel keeps at least this much unmapped
/// below a stack (its guard gap), so nothing else can be in the range.
const STACK_REACH: usize = 1024 * 1024;

/// Returns the allocator's free pages and the main thread's stack pages below the caller's frame.
#[inline(never)]
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists and takes its locks itself.
    unsafe {
        nix::libc::malloc_trim(0);
    }
    give_back_stack();
}

/// Drops the main thread's stack pages that lie below the caller's frame by more than [`STACK_MARGIN`]. Nothing
/// lives there while this runs: the thread's frames are all above it, and a signal arriving now would be handled
/// within the margin. Only on the main thread, whose stack the kernel grows downwards with a guard gap below; a
/// thread's stack is a mapping of its own with other mappings close under it.
fn give_back_stack() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpid and gettid have no preconditions.
        let main_thread = unsafe { nix::libc::getpid() == nix::libc::gettid() };
        if !main_thread {
            return;
        }
        let marker = 0u8;
        let here = std::hint::black_box(&marker) as *const u8 as usize;
        let page = 4096;
        let top = (here - STACK_MARGIN) & !(page - 1);
        let bottom = top.saturating_sub(STACK_REACH);
        // SAFETY: the range is below every live frame of this thread (see above) and within the main thread's
        // stack or the unmapped gap under it; MADV_DONTNEED on an anonymous private mapping only makes its pages
        // read back as zeros. The part of the range that is not mapped fails with ENOMEM, which is expected.
        unsafe {
            nix::libc::madvise(
                bottom as *mut nix::libc::c_void,
                top - bottom,
                nix::libc::MADV_DONTNEED,
            );
        }
    }
}

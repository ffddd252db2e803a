//! The allocator's free memory kept from piling up. A pass's memory changes phase: its own
//! peak is a burst at the capture's end (every connection still open retired at once), and
//! the report is written after it by threads of their own, each with its own allocator arena.
//! Pages one phase left free would otherwise stay resident under the next one's, and the peak
//! would count both.

/// malloc_trim(0) (glibc only; elsewhere nothing), when the allocator holds WORTH_TRIMMING or
/// more free. Before the capture's end, the text report's peak: the storm's 75 MB became 69,
/// its 4x's 100 MB 85-90. Before the JSON is written: the 4x storm's 125-132 MB became 97-117
/// (the writers' arenas vary from run to run).
pub fn give_back_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallinfo2 only reads the allocator's counts; malloc_trim releases memory that is
    // free, and no allocation in use is touched.
    unsafe {
        if libc::mallinfo2().fordblks >= WORTH_TRIMMING {
            libc::malloc_trim(0);
        }
    }
}

/// A small capture's pass leaves 1-3 MB free (the storm 25-45 MB). Handing that back bought
/// nothing: a fleet's next capture faulted the same pages in again, twice the page faults and
/// a tenth of the run's time (200 small captures to Parquet).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const WORTH_TRIMMING: usize = 8 << 20;

/// Buffers of MMAP_THRESHOLD or more (a long connection's JSON text: megabytes) mapped on
/// their own and unmapped when freed (glibc only; elsewhere nothing). glibc's default starts
/// at 128 KiB but rises to the largest mapping freed, up to 32 MiB, after which such buffers
/// are carved from the writer threads' arenas and their pages stay there: the 4x storm as JSON
/// peaked at 104-120 MB, and 88-92 MB with this, in the same time (the storm 70-72 MB).
pub fn map_large_buffers_apart() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tunable of the allocator; it touches no allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 2 << 20;

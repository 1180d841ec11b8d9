//! [`PerProcess`]: a client's connections belong to the process that opened them.

use std::fmt;
use std::sync::Mutex;

/// A value that belongs to the process that made it, such as a pool of connections: made
/// again in a child of `fork` the first time the child asks for it.
///
/// A process that forks after sending (a scheduler that forks its tasks, a pipeline that
/// forks workers) leaves the child a copy of every pooled connection: the same sockets as
/// the parent's, driven by threads and a runtime the child does not have. Used in the
/// child, such a connection waits for an answer nobody reads (a request stalls until its
/// timeout), or writes into a session the parent is using. So an adapter keeps its pools
/// in a `PerProcess`, and the child gets pools of its own.
///
/// The parent's value is never dropped in the child, only forgotten: dropping a pool can
/// say goodbye on the parent's connections (`QUIT`, an SSH disconnect) or wake its
/// threads. The memory stays, once per fork.
///
/// ```
/// use replaysafe_core::adapter::PerProcess;
/// let pool = PerProcess::new();
/// let first = pool.get_or_try_make(|| Ok::<_, std::io::Error>(std::sync::Arc::new(7)))?;
/// let again = pool.get_or_try_make(|| Ok::<_, std::io::Error>(std::sync::Arc::new(8)))?;
/// assert!(std::sync::Arc::ptr_eq(&first, &again), "made once in this process");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct PerProcess<T> {
    slot: Mutex<Option<(u32, T)>>,
}

impl<T> PerProcess<T> {
    /// Empty: the value is made on first use.
    pub const fn new() -> Self {
        PerProcess {
            slot: Mutex::new(None),
        }
    }

    /// Holding `value`, made by this process.
    pub fn with(value: T) -> Self {
        PerProcess {
            slot: Mutex::new(Some((std::process::id(), value))),
        }
    }
}

impl<T> Default for PerProcess<T> {
    fn default() -> Self {
        PerProcess::new()
    }
}

impl<T: Clone> PerProcess<T> {
    /// This process's value (a clone: hold values that are handles, such as an `Arc` or a
    /// client), made with `make` when this process has none yet. When `make` fails nothing
    /// is kept, and the next call tries again.
    pub fn get_or_try_make<E>(&self, make: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let mut slot = self
            .slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let process = std::process::id();
        match slot.as_ref() {
            Some((owner, value)) if *owner == process => return Ok(value.clone()),
            Some(_) => {
                // The parent's, in a child of `fork`: not this process's to close.
                if let Some(inherited) = slot.take() {
                    std::mem::forget(inherited);
                }
            }
            None => {}
        }
        let value = make()?;
        *slot = Some((process, value.clone()));
        Ok(value)
    }

    /// Takes this process's value out, if it made one (the parent's, in a child of
    /// `fork`, is forgotten).
    pub fn take(&mut self) -> Option<T> {
        let slot = self
            .slot
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match slot.take() {
            Some((owner, value)) if owner == std::process::id() => Some(value),
            Some(inherited) => {
                std::mem::forget(inherited);
                None
            }
            None => None,
        }
    }

    /// This process's value, if it made one.
    pub fn get(&self) -> Option<T> {
        let slot = self
            .slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match slot.as_ref() {
            Some((owner, value)) if *owner == std::process::id() => Some(value.clone()),
            _ => None,
        }
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let slot = self
            .slot
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if slot
            .as_ref()
            .is_some_and(|(owner, _)| *owner != std::process::id())
        {
            // The parent's, dropped in a child of `fork`: forgotten, not closed.
            if let Some(inherited) = slot.take() {
                std::mem::forget(inherited);
            }
        }
    }
}

impl<T> fmt::Debug for PerProcess<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let made = self
            .slot
            .lock()
            .map(|slot| slot.as_ref().map(|(owner, _)| *owner))
            .unwrap_or(None);
        f.debug_struct("PerProcess")
            .field("made_by_process", &made)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_of_another_process_is_made_again_and_never_dropped() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};

        /// Counts its drops.
        #[derive(Clone)]
        struct Pool(Arc<AtomicUsize>);
        impl Drop for Pool {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }

        let drops = Arc::new(AtomicUsize::new(0));
        // As a child of `fork` finds it: a value its parent (another process id) made.
        let pool = PerProcess {
            slot: Mutex::new(Some((u32::MAX, Pool(drops.clone())))),
        };
        assert!(
            pool.get().is_none(),
            "the parent's value is not this process's"
        );
        let made = pool
            .get_or_try_make(|| Ok::<_, ()>(Pool(Arc::new(AtomicUsize::new(0)))))
            .unwrap();
        assert!(!Arc::ptr_eq(&made.0, &drops), "made again");
        assert_eq!(drops.load(Ordering::SeqCst), 0, "the parent's is forgotten");
        assert!(pool.get().is_some_and(|p| Arc::ptr_eq(&p.0, &made.0)));

        let inherited = PerProcess {
            slot: Mutex::new(Some((u32::MAX, Pool(drops.clone())))),
        };
        drop(inherited);
        assert_eq!(drops.load(Ordering::SeqCst), 0, "not dropped in the child");

        // A failure keeps nothing; the next call tries again.
        let empty: PerProcess<Pool> = PerProcess::new();
        assert!(empty.get_or_try_make(|| Err::<Pool, _>("down")).is_err());
        assert!(empty.get().is_none());
    }
}

//! [`PerProcess`]: a client's connections belong to the process that opened them.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

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
    /// The value and the process that made it (0: one every process may use).
    slot: Mutex<Option<(u32, T)>>,
}

/// This process's value, under the lock ([`PerProcess::lock_or_try_make`]).
pub struct Held<'a, T>(MutexGuard<'a, Option<(u32, T)>>);

impl<T> Deref for Held<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0.as_ref().expect("held only once made").1
    }
}

impl<T> DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0.as_mut().expect("held only once made").1
    }
}

impl<T> fmt::Debug for Held<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held").finish_non_exhaustive()
    }
}

/// Forgets a value another process made (the parent's, in a child of `fork`): not this
/// process's to close. Whether a value this process may use is left.
fn keep_own<T>(slot: &mut Option<(u32, T)>) -> bool {
    let process = std::process::id();
    match slot {
        Some((owner, _)) if *owner == process || *owner == 0 => true,
        Some(_) => {
            std::mem::forget(slot.take());
            false
        }
        None => false,
    }
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

    /// Holding `value`, which a child of `fork` goes on using: a value that is the
    /// process's own memory and no connection (a database in memory, whose copy in the
    /// child is the child's).
    pub fn kept_by_children(value: T) -> Self {
        PerProcess {
            slot: Mutex::new(Some((0, value))),
        }
    }

    /// This process's value, made with `make` when this process has none yet, held under
    /// the lock until the [`Held`] is dropped. When `make` fails nothing is kept, and the
    /// next call tries again.
    pub fn lock_or_try_make<E>(
        &self,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Held<'_, T>, E> {
        let mut slot = self
            .slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !keep_own(&mut slot) {
            *slot = Some((std::process::id(), make()?));
        }
        Ok(Held(slot))
    }

    /// Takes this process's value out, if it has one.
    pub fn take(&mut self) -> Option<T> {
        let slot = self
            .slot
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if keep_own(slot) {
            slot.take().map(|(_, value)| value)
        } else {
            None
        }
    }
}

impl<T: Default> PerProcess<T> {
    /// This process's value, made with `T::default()` when this process has none yet
    /// (a list of idle sessions, empty in a child of `fork`).
    pub fn lock_or_default(&self) -> Held<'_, T> {
        match self.lock_or_try_make(|| Ok::<_, std::convert::Infallible>(T::default())) {
            Ok(held) => held,
            Err(never) => match never {},
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
    /// client), made with `make` when this process has none yet; see
    /// [`PerProcess::lock_or_try_make`].
    pub fn get_or_try_make<E>(&self, make: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        self.lock_or_try_make(make).map(|held| held.clone())
    }

    /// This process's value, if it has one.
    pub fn get(&self) -> Option<T> {
        let mut slot = self
            .slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if keep_own(&mut slot) {
            slot.as_ref().map(|(_, value)| value.clone())
        } else {
            None
        }
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let slot = self
            .slot
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // This process's value is dropped as usual; the parent's is forgotten.
        keep_own(slot);
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

        // A value every process may use stays, in a child too.
        let kept = PerProcess::kept_by_children(Pool(drops.clone()));
        let held = kept
            .lock_or_try_make(|| Ok::<_, ()>(Pool(Arc::new(AtomicUsize::new(0)))))
            .unwrap();
        let pool: &Pool = &held;
        assert!(Arc::ptr_eq(&pool.0, &drops), "kept, not made again");
        drop(held);

        // A failure keeps nothing; the next call tries again.
        let empty: PerProcess<Pool> = PerProcess::new();
        assert!(empty.get_or_try_make(|| Err::<Pool, _>("down")).is_err());
        assert!(empty.get().is_none());
    }
}

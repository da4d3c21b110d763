//! What a context remembers between calls (compiled pipelines, tuned configurations,
//! probed loop budgets), in one store keyed by the types of key and value, so that the
//! context needs to know none of the types it holds.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

/// What a memo entry must be to live in a context: shareable across threads natively
/// (the context is `Send + Sync` there); anything on the web, where nothing is.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) trait Memoizable: Send + Sync + 'static {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + Sync + 'static> Memoizable for T {}
#[cfg(target_arch = "wasm32")]
pub(crate) trait Memoizable: 'static {}
#[cfg(target_arch = "wasm32")]
impl<T: 'static> Memoizable for T {}

#[cfg(not(target_arch = "wasm32"))]
type Table = Box<dyn Any + Send + Sync>;
#[cfg(target_arch = "wasm32")]
type Table = Box<dyn Any>;

/// One map per (key type, value type).
#[derive(Default)]
pub(crate) struct Memo {
    tables: Mutex<HashMap<TypeId, Table>>,
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo").finish_non_exhaustive()
    }
}

impl Memo {
    /// The value remembered for `key`, if any. A poisoned lock reads as empty.
    pub(crate) fn get<K, V>(&self, key: &K) -> Option<V>
    where
        K: Eq + Hash + Memoizable,
        V: Clone + Memoizable,
    {
        let tables = self.tables.lock().ok()?;
        let table = tables.get(&TypeId::of::<HashMap<K, V>>())?;
        table.downcast_ref::<HashMap<K, V>>()?.get(key).cloned()
    }

    /// Remembers `value` for `key`. A poisoned lock only loses the memo.
    pub(crate) fn insert<K, V>(&self, key: K, value: V)
    where
        K: Eq + Hash + Memoizable,
        V: Clone + Memoizable,
    {
        let Ok(mut tables) = self.tables.lock() else {
            return;
        };
        let table = tables
            .entry(TypeId::of::<HashMap<K, V>>())
            .or_insert_with(|| Box::new(HashMap::<K, V>::new()));
        if let Some(map) = table.downcast_mut::<HashMap<K, V>>() {
            map.insert(key, value);
        }
    }
}

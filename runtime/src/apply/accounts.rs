//! User and group names and ids, looked up through the C library (so NSS sources such as LDAP
//! count, as they do for the reference's `pwd`/`grp`) and cached for the duration of an apply:
//! thousands of files owned by the same user cost one lookup.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::hash::Hash;
use std::mem::MaybeUninit;
use std::sync::RwLock;

/// The lookup buffers grow up to this size when the C library asks for more (`ERANGE`); an
/// entry larger than this is treated as not found rather than growing without bound.
const LARGEST_LOOKUP_BUFFER: usize = 1 << 20;

/// Cached name ↔ id lookups.
#[derive(Debug, Default)]
pub(super) struct Accounts {
    uid_by_name: Cache<String, Option<u32>>,
    gid_by_name: Cache<String, Option<u32>>,
    user_by_uid: Cache<u32, Option<String>>,
    group_by_gid: Cache<u32, Option<String>>,
}

impl Accounts {
    /// The uid of a user name; a string of digits that names no user is taken as a uid.
    pub fn uid(&self, name: &str) -> Option<u32> {
        self.uid_by_name.get_or_insert(name, user_id).or_else(|| name.parse().ok())
    }

    /// The gid of a group name; a string of digits that names no group is taken as a gid.
    pub fn gid(&self, name: &str) -> Option<u32> {
        self.gid_by_name.get_or_insert(name, group_id).or_else(|| name.parse().ok())
    }

    /// The name of a uid, or the number as text when no user has it (as the reference's
    /// `file_stat` reports it).
    pub fn user_name(&self, uid: u32) -> String {
        self.user_by_uid.get_or_insert(&uid, |&uid| user_name(uid)).unwrap_or_else(|| uid.to_string())
    }

    /// The name of a gid, or the number as text when no group has it.
    pub fn group_name(&self, gid: u32) -> String {
        self.group_by_gid.get_or_insert(&gid, |&gid| group_name(gid)).unwrap_or_else(|| gid.to_string())
    }

    /// Whether `desired` (a user name or a uid in digits) is `uid`.
    pub fn user_matches(&self, desired: &str, uid: u32) -> bool {
        self.uid(desired) == Some(uid)
    }

    /// Whether `desired` (a group name or a gid in digits) is `gid`.
    pub fn group_matches(&self, desired: &str, gid: u32) -> bool {
        self.gid(desired) == Some(gid)
    }
}

/// A read-mostly memo table shared by the workers.
#[derive(Debug)]
struct Cache<K, V>(RwLock<HashMap<K, V>>);

impl<K, V> Default for Cache<K, V> {
    fn default() -> Self {
        Cache(RwLock::new(HashMap::new()))
    }
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    fn get_or_insert<Q>(&self, key: &Q, compute: impl FnOnce(&Q) -> V) -> V
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ToOwned<Owned = K> + ?Sized,
    {
        // A poisoned lock only means another worker panicked while inserting; the map itself
        // is still a valid memo, so keep using it.
        if let Some(value) = self.0.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            return value.clone();
        }
        let value = compute(key);
        self.0.write().unwrap_or_else(|e| e.into_inner()).insert(key.to_owned(), value.clone());
        value
    }
}

/// Calls a `get*_r` function with a growing buffer until it fits, and reads the entry it found.
///
/// `call` receives the entry to fill, the buffer and its length, and the result pointer, and
/// returns the function's error number; `read` extracts what we need from a found entry.
fn lookup<Entry, T>(
    call: impl Fn(*mut Entry, *mut libc::c_char, usize, *mut *mut Entry) -> libc::c_int,
    read: impl FnOnce(&Entry) -> T,
) -> Option<T> {
    let mut buffer: Vec<libc::c_char> = vec![0; 1024];
    loop {
        let mut entry = MaybeUninit::<Entry>::uninit();
        let mut found: *mut Entry = std::ptr::null_mut();
        let error = call(entry.as_mut_ptr(), buffer.as_mut_ptr(), buffer.len(), &mut found);
        if error == libc::ERANGE && buffer.len() < LARGEST_LOOKUP_BUFFER {
            buffer.resize(buffer.len() * 2, 0);
            continue;
        }
        if error != 0 || found.is_null() {
            return None;
        }
        // SAFETY: the function returned success with a non-null result, which then points to
        // `entry`, fully initialised; its string fields point into `buffer`, which outlives
        // this borrow.
        let entry = unsafe { &*found };
        return Some(read(entry));
    }
}

/// Copies a C string the C library returned in an entry.
///
/// # Safety
/// `text` must be null or point to a NUL-terminated string that stays valid for the call.
unsafe fn owned_text(text: *const libc::c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated, as the caller guarantees.
    Some(unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned())
}

fn user_id(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    lookup(
        // SAFETY: every pointer is valid for the call: `name` is NUL-terminated, the entry and
        // result pointers point to live locals, and the buffer length is its real length.
        |entry, buffer, length, found| unsafe { libc::getpwnam_r(name.as_ptr(), entry, buffer, length, found) },
        |entry: &libc::passwd| entry.pw_uid,
    )
}

fn group_id(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    lookup(
        // SAFETY: as in `user_id`.
        |entry, buffer, length, found| unsafe { libc::getgrnam_r(name.as_ptr(), entry, buffer, length, found) },
        |entry: &libc::group| entry.gr_gid,
    )
}

fn user_name(uid: u32) -> Option<String> {
    lookup(
        // SAFETY: the entry and result pointers point to live locals and the buffer length is
        // its real length.
        |entry, buffer, length, found| unsafe { libc::getpwuid_r(uid, entry, buffer, length, found) },
        // SAFETY: `pw_name` points into the lookup buffer, alive during `read`.
        |entry: &libc::passwd| unsafe { owned_text(entry.pw_name) },
    )
    .flatten()
}

fn group_name(gid: u32) -> Option<String> {
    lookup(
        // SAFETY: as in `user_name`.
        |entry, buffer, length, found| unsafe { libc::getgrgid_r(gid, entry, buffer, length, found) },
        // SAFETY: `gr_name` points into the lookup buffer, alive during `read`.
        |entry: &libc::group| unsafe { owned_text(entry.gr_name) },
    )
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_user_round_trips() {
        // SAFETY: getuid and getgid cannot fail and touch no memory of ours.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let accounts = Accounts::default();
        let name = accounts.user_name(uid);
        assert_eq!(accounts.uid(&name), Some(uid));
        assert!(accounts.user_matches(&name, uid));
        assert!(accounts.user_matches(&uid.to_string(), uid));
        let group = accounts.group_name(gid);
        assert_eq!(accounts.gid(&group), Some(gid));
        assert_eq!(accounts.uid("no-such-user-weft-test"), None);
        assert_eq!(accounts.user_name(4_000_000_000), "4000000000");
    }
}

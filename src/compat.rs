//! What differs between the PostgreSQL versions indexnow is built for (15 to 18), in one place,
//! the way pgrx itself does it: one function per difference, chosen by the `pgNN` feature.

use pgrx::pg_sys;

/// Attribute `i` (0-based) of a tuple descriptor. PostgreSQL 18 keeps a compact array in front of
/// the full `pg_attribute` rows (`TupleDescAttr()` is an inline function in C, so it is not in
/// the bindings).
///
/// # Safety
/// `desc` must be a valid tuple descriptor and `i < natts`.
pub unsafe fn attribute<'a>(
    desc: pg_sys::TupleDesc,
    i: usize,
) -> &'a pg_sys::FormData_pg_attribute {
    debug_assert!(i < (*desc).natts as usize);
    #[cfg(not(feature = "pg18"))]
    {
        &*(*desc).attrs.as_ptr().add(i)
    }
    #[cfg(feature = "pg18")]
    {
        let first = (*desc)
            .compact_attrs
            .as_ptr()
            .add((*desc).natts as usize)
            .cast::<pg_sys::FormData_pg_attribute>();
        &*first.add(i)
    }
}

/// The OID of the relation's primary key index, or `InvalidOid`. PostgreSQL 18 asks whether a
/// deferrable key will do; earlier versions never take one (only immediate indexes count), and
/// neither does indexnow on any version (`indexnow_watch()` refuses a table whose key is
/// deferrable).
///
/// # Safety
/// `relation` must be an open relation.
pub unsafe fn primary_key_index(relation: pg_sys::Relation) -> pg_sys::Oid {
    #[cfg(not(feature = "pg18"))]
    {
        pg_sys::RelationGetPrimaryKeyIndex(relation)
    }
    #[cfg(feature = "pg18")]
    {
        pg_sys::RelationGetPrimaryKeyIndex(relation, false)
    }
}

/// Sets when the trigger `name` of the open relation `relation` fires (`fires_when`:
/// `TRIGGER_FIRES_ALWAYS`, `TRIGGER_FIRES_ON_ORIGIN`), as `ALTER TABLE ... ENABLE [ALWAYS]
/// TRIGGER` does, on this table only (a statement trigger is never cloned to partitions).
/// PostgreSQL 16 added the parent trigger and whether to recurse; 15 keeps its first signature
/// (its later minor releases add the new one under another name).
///
/// # Safety
/// `relation` must be open and locked in `ShareRowExclusiveLock` or stronger.
pub unsafe fn set_trigger_firing(
    relation: pg_sys::Relation,
    name: &std::ffi::CStr,
    fires_when: u8,
) {
    #[cfg(feature = "pg15")]
    pg_sys::EnableDisableTrigger(
        relation,
        name.as_ptr(),
        fires_when as std::ffi::c_char,
        false,
        pg_sys::ShareRowExclusiveLock as pg_sys::LOCKMODE,
    );
    #[cfg(not(feature = "pg15"))]
    pg_sys::EnableDisableTrigger(
        relation,
        name.as_ptr(),
        pg_sys::InvalidOid,
        fires_when as std::ffi::c_char,
        false,
        false,
        pg_sys::ShareRowExclusiveLock as pg_sys::LOCKMODE,
    );
}

/// Installs `handler` for signal `signo` in a backend (`pqsignal_be` from 18 on).
///
/// # Safety
/// A signal handler of this process, as PostgreSQL's own are installed.
pub unsafe fn backend_signal(signo: u32, handler: unsafe extern "C-unwind" fn(i32)) {
    #[cfg(not(feature = "pg18"))]
    pg_sys::pqsignal(signo as i32, Some(handler));
    #[cfg(feature = "pg18")]
    pg_sys::pqsignal_be(signo as i32, Some(handler));
}

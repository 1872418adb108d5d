//! The file layout (drawn in the crate docs): constants, the CBOR byte-string
//! head, the versioned index, and the streaming writer and bounded reader.

mod cbor_head;
mod index;
pub(crate) mod read;
pub(crate) mod write;

/// First 8 bytes of every checkpoint.
pub const MAGIC: [u8; 8] = *b"NITROCKP";
/// Last 8 bytes of every complete checkpoint; a file cut short lacks them.
pub const END_MAGIC: [u8; 8] = *b"NCKPEND\0";
/// The version this crate writes.
pub const VERSION: u32 = 2;
/// The oldest version this crate reads (one back, as promised).
pub const OLDEST_READABLE: u32 = 1;
/// Magic, version (u32 LE), reserved flags (u32 LE, zero).
pub const HEADER_LEN: u64 = 16;
/// Index offset (u64 LE), index length (u64 LE), blake3 of header and index
/// (32 bytes), end magic (8 bytes).
pub const FOOTER_LEN: u64 = 8 + 8 + 32 + 8;
/// Largest index (metadata + tensor table) a reader accepts. Real indexes are
/// kilobytes to a few megabytes (a long metrics history); the cap bounds the
/// memory a hostile file can make the decoder spend on structure, which can
/// reach a few dozen times the index size in Rust values.
pub const MAX_INDEX_BYTES: u64 = 64 << 20;
/// Deepest CBOR nesting the index decoder follows. Metadata nests a handful
/// of levels plus user values; 128 leaves room for those while keeping the
/// recursive decoder far from the stack limit of a test thread.
pub const MAX_DEPTH: usize = 128;

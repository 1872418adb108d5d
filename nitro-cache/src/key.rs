//! Keys: a blake3 hash over named, categorised parts, and the builder that
//! writes their canonical byte stream.
//!
//! # The key stream
//!
//! ```text
//! "nitro-cache key v1\n"                  19-byte header
//! per part, in the order they were added:
//!   u8   category tag                     (Category::tag)
//!   u64  name length (LE), name bytes     (UTF-8)
//!   u64  value length (LE), value bytes   (the canonical encoding, see `encoding`)
//! ```
//!
//! Every part is framed by lengths, so the stream parses back into exactly
//! one part list: two different lists (names, categories, values or order)
//! cannot produce the same bytes. The key is `blake3(stream)`.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;

use crate::encoding::{self, EncodeError};
use crate::value;

const HEADER: &[u8] = b"nitro-cache key v1\n";

/// What a part of a key stands for. The category is hashed with the part,
/// printed in diagnostics, and lets a reader see at a glance *why* a key
/// changed. There is deliberately no category for Device or Host values: they
/// never enter a key (wrap one in [`crate::Unkeyed`] if it sits inside a
/// hashed structure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// A plain label: program kind, experiment type, anything by name.
    Part,
    /// A value baked into the program as a trace-time constant.
    GraphConst,
    /// A traced input's signature (dtype and shape, never its value).
    Input,
    /// The structure and shapes of a parameter or state tree.
    Structure,
    /// A configuration compiled into the program (optimizer, loss).
    Config,
    /// The environment the program was compiled for (backend, device, crate version).
    Env,
    /// A content hash of the traced graph itself: it changes when anything
    /// the named parts do not capture changes (model structure built from a
    /// Host value, a constant a closure captured).
    Graph,
}

impl Category {
    /// The name printed in diagnostics (`graph_const`, `input`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Part => "part",
            Category::GraphConst => "graph_const",
            Category::Input => "input",
            Category::Structure => "structure",
            Category::Config => "config",
            Category::Env => "env",
            Category::Graph => "graph",
        }
    }

    /// The byte that stands for this category in the key stream.
    pub fn tag(self) -> u8 {
        match self {
            Category::Part => 1,
            Category::GraphConst => 2,
            Category::Input => 3,
            Category::Structure => 4,
            Category::Config => 5,
            Category::Env => 6,
            Category::Graph => 7,
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a key could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A part's value has no canonical encoding.
    #[error("key part {category} `{name}` cannot be hashed by content: {source}")]
    NotCanonical {
        /// The part's category.
        category: Category,
        /// The part's name.
        name: String,
        /// What the encoder refused.
        source: EncodeError,
    },
    /// The same category and name were added twice; the diff of a miss would
    /// be ambiguous, and it is almost always a bug in the caller.
    #[error("key part {category} `{name}` was added twice; give each part a distinct name")]
    DuplicatePart {
        /// The part's category.
        category: Category,
        /// The part's name.
        name: String,
    },
}

#[derive(Debug, Clone)]
struct Span {
    category: Category,
    name: Range<usize>,
    value: Range<usize>,
}

/// Builds a [`Key`] part by part. Methods chain; the first error is kept and
/// reported by [`KeyBuilder::finish`].
///
/// ```
/// use nitro_cache::KeyBuilder;
/// let key = KeyBuilder::new()
///     .part("experiment", "Mnist")
///     .graph_const("width", &128usize)
///     .input_sig("img", "f32[256,784]")
///     .finish()
///     .unwrap();
/// assert_eq!(key.parts().count(), 3);
/// ```
#[derive(Debug, Clone)]
pub struct KeyBuilder {
    stream: Vec<u8>,
    spans: Vec<Span>,
    error: Option<KeyError>,
}

impl Default for KeyBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyBuilder {
    /// An empty key.
    pub fn new() -> Self {
        let mut stream = Vec::with_capacity(1024);
        stream.extend_from_slice(HEADER);
        KeyBuilder {
            stream,
            spans: Vec::with_capacity(24),
            error: None,
        }
    }

    /// A plain label, e.g. `.part("experiment", "Mnist")`.
    pub fn part(self, name: &str, value: &str) -> Self {
        self.text(Category::Part, name, value)
    }

    /// A GraphConst value, hashed by content (`Vec` by its elements, structs
    /// field by field). Refused if its encoding is not canonical.
    pub fn graph_const<T: Serialize + ?Sized>(self, name: &str, value: &T) -> Self {
        self.with(Category::GraphConst, name, value)
    }

    /// A traced input's signature, e.g. `.input_sig("img", "f32[256,784]")`.
    pub fn input_sig(self, name: &str, signature: &str) -> Self {
        self.text(Category::Input, name, signature)
    }

    /// A parameter or state tree's structure and shapes, by content.
    pub fn structure<T: Serialize + ?Sized>(self, name: &str, value: &T) -> Self {
        self.with(Category::Structure, name, value)
    }

    /// A configuration compiled into the program (optimizer, loss), by content.
    pub fn config<T: Serialize + ?Sized>(self, name: &str, value: &T) -> Self {
        self.with(Category::Config, name, value)
    }

    /// The environment: backend, device, crate version, e.g. `.env("backend", "cpu")`.
    pub fn env(self, name: &str, value: &str) -> Self {
        self.text(Category::Env, name, value)
    }

    /// The content hash of the traced graph (see [`Category::Graph`]); a
    /// miss on it alone is explained as "the traced graph differs".
    pub fn graph(self, hash: &str) -> Self {
        self.text(Category::Graph, "traced_graph", hash)
    }

    /// Any category, any serialisable value.
    pub fn with<T: Serialize + ?Sized>(self, category: Category, name: &str, value: &T) -> Self {
        self.push(category, name, |out| encoding::encode_into(out, value))
    }

    fn text(self, category: Category, name: &str, value: &str) -> Self {
        self.push(category, name, |out| {
            encoding::encode_str(out, value);
            Ok(())
        })
    }

    fn push(
        mut self,
        category: Category,
        name: &str,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(), EncodeError>,
    ) -> Self {
        if self.error.is_some() {
            return self;
        }
        let start = self.stream.len();
        self.stream.push(category.tag());
        encoding::put_len(&mut self.stream, name.len());
        let name_start = self.stream.len();
        self.stream.extend_from_slice(name.as_bytes());
        let name_range = name_start..self.stream.len();
        let len_at = encoding::reserve_len(&mut self.stream);
        let value_start = self.stream.len();
        match encode(&mut self.stream) {
            Ok(()) => {
                let value_len = self.stream.len() - value_start;
                encoding::patch_len(&mut self.stream, len_at, value_len);
                self.spans.push(Span {
                    category,
                    name: name_range,
                    value: value_start..self.stream.len(),
                });
            }
            Err(source) => {
                self.stream.truncate(start);
                self.error = Some(KeyError::NotCanonical {
                    category,
                    name: name.to_owned(),
                    source,
                });
            }
        }
        self
    }

    /// Hash the parts into a key.
    pub fn finish(self) -> Result<Key, KeyError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let name = |s: &Span| &self.stream[s.name.clone()];
        for (i, a) in self.spans.iter().enumerate() {
            if let Some(b) = self.spans[..i]
                .iter()
                .find(|b| b.category == a.category && name(b) == name(a))
            {
                return Err(KeyError::DuplicatePart {
                    category: b.category,
                    name: String::from_utf8_lossy(name(b)).into_owned(),
                });
            }
        }
        let hash = *blake3::hash(&self.stream).as_bytes();
        Ok(Key {
            hash,
            data: Arc::new(KeyData {
                stream: self.stream,
                spans: self.spans,
            }),
        })
    }
}

#[derive(Debug)]
struct KeyData {
    stream: Vec<u8>,
    spans: Vec<Span>,
}

/// A content hash over named parts. Equality and hashing use the 32-byte
/// digest only; the parts are kept (shared, cheap to clone) for diagnostics.
/// `Display` prints the first 16 hex digits; [`Key::hex`] all 64.
#[derive(Clone)]
pub struct Key {
    hash: [u8; 32],
    data: Arc<KeyData>,
}

impl Key {
    /// The blake3 digest.
    pub fn digest(&self) -> &[u8; 32] {
        &self.hash
    }

    /// All 64 hex digits of the digest.
    pub fn hex(&self) -> String {
        hex(&self.hash)
    }

    /// The parts in the order they were added.
    pub fn parts(&self) -> impl ExactSizeIterator<Item = PartRef<'_>> + '_ {
        self.data.spans.iter().map(move |span| PartRef {
            stream: &self.data.stream,
            span,
        })
    }

    /// The exact bytes that were hashed (see the module doc for the layout).
    pub fn stream(&self) -> &[u8] {
        &self.data.stream
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.hash.hash(state);
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.hash[..8]))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self}) ")?;
        f.debug_list().entries(self.parts()).finish()
    }
}

/// One part of a [`Key`], borrowed.
#[derive(Clone, Copy)]
pub struct PartRef<'a> {
    stream: &'a [u8],
    span: &'a Span,
}

impl<'a> PartRef<'a> {
    /// The part's category.
    pub fn category(&self) -> Category {
        self.span.category
    }

    /// The part's name.
    pub fn name(&self) -> &'a str {
        // Written from a `&str` by the builder.
        std::str::from_utf8(&self.stream[self.span.name.clone()]).unwrap_or("<non-utf8>")
    }

    /// The canonical encoding of the part's value.
    pub fn value_bytes(&self) -> &'a [u8] {
        &self.stream[self.span.value.clone()]
    }

    /// The value for humans: `128`, `f32[256,784]`, `Adam { lr: 0.001 }`
    /// (cut at 80 characters).
    pub fn render(&self) -> String {
        value::render(self.value_bytes(), 80)
    }
}

impl fmt::Debug for PartRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}` {}", self.category(), self.name(), self.render())
    }
}

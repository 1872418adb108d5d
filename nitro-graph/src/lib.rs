//! nitro-graph: the tensor compiler. (Being written; see issue 2.)
#![warn(missing_docs)]

//! Composite ops and a small neural-network vocabulary, all built from the
//! primitives (so autodiff and every backend get them for free).

//! Digits.

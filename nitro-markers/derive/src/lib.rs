//! Derive macros for `nitro-markers`: `#[derive(Experiment)]`,
//! `#[derive(Fields)]`, `#[derive(Tree)]`, and the `#[marker_table]`
//! attribute. Use them through `nitro_markers`, which re-exports them and
//! documents what they generate.
#![warn(missing_docs)]

mod experiment;
mod fields;
mod model;
mod tree;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

fn emit(result: syn::Result<proc_macro2::TokenStream>) -> TokenStream {
    result.unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Implements `nitro_markers::ExperimentFields` and generates the compile
/// view type `<Name>View<T>`. See `nitro_markers` for the attributes.
#[proc_macro_derive(Experiment, attributes(experiment))]
pub fn derive_experiment(input: TokenStream) -> TokenStream {
    emit(experiment::derive(parse_macro_input!(input as DeriveInput)))
}

/// Appends the marker table (field, category, type, default) to the
/// struct's rustdoc. Put it above `#[derive(Experiment)]`.
#[proc_macro_attribute]
pub fn marker_table(args: TokenStream, input: TokenStream) -> TokenStream {
    if !args.is_empty() {
        let msg = "`#[marker_table]` takes no arguments";
        return syn::Error::new(proc_macro2::Span::call_site(), msg)
            .into_compile_error()
            .into();
    }
    emit(experiment::marker_table(parse_macro_input!(
        input as DeriveInput
    )))
}

/// Implements `nitro_markers::BatchFields` for a hook's batch struct.
#[proc_macro_derive(Fields, attributes(fields))]
pub fn derive_fields(input: TokenStream) -> TokenStream {
    emit(fields::derive(parse_macro_input!(input as DeriveInput)))
}

/// Implements `nitro_markers::Tree` for a struct of subtrees.
#[proc_macro_derive(Tree)]
pub fn derive_tree(input: TokenStream) -> TokenStream {
    emit(tree::derive(parse_macro_input!(input as DeriveInput)))
}

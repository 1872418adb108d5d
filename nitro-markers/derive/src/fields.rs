//! `#[derive(Fields)]`: a hook's batch declaration.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{DeriveInput, GenericParam, Type};

use crate::model::named_fields;

fn option_inner(ty: &Type) -> Option<&Type> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != "Option" {
        return None;
    }
    match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => match a.args.first()? {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        },
        _ => None,
    }
}

pub fn derive(input: DeriveInput) -> syn::Result<TokenStream> {
    let fields = named_fields(&input, "#[derive(Fields)]")?;
    let name = &input.ident;
    let name_str = name.to_string();
    let m = quote!(::nitro_markers);

    let mut leaf: Option<Type> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("fields")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("leaf") {
                leaf = Some(meta.value()?.parse()?);
                Ok(())
            } else {
                Err(meta.error("expected `leaf = <type>`"))
            }
        })?;
    }
    let type_params: Vec<_> = input
        .generics
        .params
        .iter()
        .filter_map(|p| match p {
            GenericParam::Type(t) => Some(t.ident.clone()),
            _ => None,
        })
        .collect();
    let leaf = match (leaf, type_params.as_slice()) {
        (Some(l), _) => l,
        (None, [one]) => syn::parse_quote!(#one),
        (None, _) => {
            let first = fields
                .iter()
                .map(|f| option_inner(&f.ty).unwrap_or(&f.ty))
                .next();
            match first {
                Some(t) if type_params.is_empty() => t.clone(),
                _ => {
                    let msg = "cannot tell the leaf type: add `#[fields(leaf = YourTensor)]`";
                    return Err(syn::Error::new_spanned(name, msg));
                }
            }
        }
    };

    let mut required = Vec::new();
    let mut optional = Vec::new();
    let inits = fields.iter().map(|f| {
        let ident = f.ident.as_ref().expect("named");
        let key = ident.to_string();
        if option_inner(&f.ty).is_some() {
            optional.push(key.clone());
            quote!(#ident: #m::BatchSource::take(batch, #key))
        } else {
            required.push(key.clone());
            quote!(#ident: match #m::BatchSource::take(batch, #key) {
                ::core::option::Option::Some(v) => v,
                ::core::option::Option::None => return ::core::result::Result::Err(#m::missing_field(#name_str, #key, batch)),
            })
        }
    });
    let inits: Vec<_> = inits.collect();
    let (impl_g, ty_g, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_g #m::BatchFields<#leaf> for #name #ty_g #where_clause {
            fn required_fields() -> &'static [&'static str] { &[#(#required),*] }
            fn optional_fields() -> &'static [&'static str] { &[#(#optional),*] }
            fn from_batch(batch: &mut impl #m::BatchSource<#leaf>) -> ::core::result::Result<Self, #m::MissingField> {
                ::core::result::Result::Ok(Self { #(#inits,)* })
            }
        }
    })
}

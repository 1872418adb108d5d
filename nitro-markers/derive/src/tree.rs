//! `#[derive(Tree)]`: a struct whose fields are subtrees, named by field.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields, Index, Member};

pub fn derive(input: DeriveInput) -> syn::Result<TokenStream> {
    let name = &input.ident;
    let m = quote!(::nitro_markers);
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            name,
            "#[derive(Tree)] needs a struct",
        ));
    };
    let members: Vec<(Member, String, &syn::Type)> = match &data.fields {
        Fields::Named(f) => f
            .named
            .iter()
            .map(|f| {
                let id = f.ident.clone().expect("named");
                (Member::Named(id.clone()), id.to_string(), &f.ty)
            })
            .collect(),
        Fields::Unnamed(f) => f
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| (Member::Unnamed(Index::from(i)), i.to_string(), &f.ty))
            .collect(),
        Fields::Unit => Vec::new(),
    };
    let mut generics = input.generics.clone();
    generics
        .params
        .push(syn::parse_quote!(__NitroK: #m::LeafKind));
    let where_clause = generics.make_where_clause();
    for (_, _, ty) in &members {
        where_clause
            .predicates
            .push(syn::parse_quote!(#ty: #m::Tree<__NitroK>));
    }
    let (impl_g, _, where_clause) = generics.split_for_impl();
    let (_, ty_g, _) = input.generics.split_for_impl();
    let visits = members.iter().map(|(member, seg, _)| {
        quote!(#m::with_segment(path, &#seg, |p| #m::Tree::<__NitroK>::visit(&self.#member, p, f));)
    });
    let rebuilds = members.iter().map(|(member, seg, _)| {
        quote!(#member: #m::with_segment(path, &#seg, |p| #m::Tree::<__NitroK>::rebuild(&self.#member, p, leaves))?)
    });
    Ok(quote! {
        impl #impl_g #m::Tree<__NitroK> for #name #ty_g #where_clause {
            #[allow(unused_variables)]
            fn visit<'__a>(&'__a self, path: &mut ::std::string::String, f: &mut dyn FnMut(&str, &'__a <__NitroK as #m::LeafKind>::Leaf)) {
                #(#visits)*
            }
            #[allow(unused_variables)]
            fn rebuild(
                &self,
                path: &mut ::std::string::String,
                leaves: &mut dyn ::core::iter::Iterator<Item = <__NitroK as #m::LeafKind>::Leaf>,
            ) -> ::core::result::Result<Self, #m::TreeError> {
                ::core::result::Result::Ok(Self { #(#rebuilds,)* })
            }
        }
    })
}

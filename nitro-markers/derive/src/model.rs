//! Parsing an experiment struct into fields with categories, docs, defaults.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{
    Attribute, Data, DeriveInput, Expr, Fields, GenericArgument, Ident, PathArguments, Type,
};

/// A field category, as the declaration says.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Category {
    GraphConst,
    Device,
    /// `Host<T>` written out.
    MarkedHost,
    /// Unmarked: Host by default.
    Host,
}

impl Category {
    pub fn label(self) -> &'static str {
        match self {
            Category::GraphConst => "GraphConst",
            Category::Device => "Device",
            Category::MarkedHost | Category::Host => "Host",
        }
    }
    pub fn is_host(self) -> bool {
        matches!(self, Category::MarkedHost | Category::Host)
    }
}

pub struct Field {
    pub ident: Ident,
    pub ty: Type,
    /// The type inside the marker (the field type if unmarked).
    pub inner: Type,
    pub category: Category,
    pub doc: String,
    pub default: Option<Expr>,
    pub opaque: bool,
    /// `range = <range expr>`: the values construction, presets and
    /// overrides accept.
    pub range: Option<Expr>,
}

impl Field {
    pub fn name(&self) -> String {
        self.ident.to_string()
    }
}

pub fn type_text(ty: &impl ToTokens) -> String {
    let text = ty.to_token_stream().to_string();
    text.replace(" < ", "<")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
        .replace(" ;", ";")
}

pub fn doc_text(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value().trim().to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    lines.join(" ").trim().to_string()
}

fn marker(ty: &Type) -> Option<(Category, Type)> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    let category = match last.ident.to_string().as_str() {
        "GraphConst" => Category::GraphConst,
        "Device" => Category::Device,
        "Host" => Category::MarkedHost,
        _ => return None,
    };
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        GenericArgument::Type(inner) if args.args.len() == 1 => Some((category, inner.clone())),
        _ => None,
    }
}

pub fn named_fields(input: &DeriveInput, what: &str) -> syn::Result<Vec<syn::Field>> {
    match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => Ok(named.named.iter().cloned().collect()),
            _ => Err(syn::Error::new_spanned(
                &input.ident,
                format!("{what} needs a struct with named fields"),
            )),
        },
        _ => Err(syn::Error::new_spanned(
            &input.ident,
            format!("{what} needs a struct with named fields"),
        )),
    }
}

pub fn parse_fields(input: &DeriveInput) -> syn::Result<Vec<Field>> {
    named_fields(input, "#[derive(Experiment)]")?
        .into_iter()
        .map(|f| {
            let ident = f.ident.clone().expect("named fields have names");
            let (category, inner) = marker(&f.ty).unwrap_or((Category::Host, f.ty.clone()));
            let mut field =
                Field { ident, ty: f.ty.clone(), inner, category, doc: doc_text(&f.attrs), default: None, opaque: false, range: None };
            for attr in f.attrs.iter().filter(|a| a.path().is_ident("experiment")) {
                attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("default") {
                        field.default = Some(meta.value()?.parse()?);
                        Ok(())
                    } else if meta.path.is_ident("opaque") {
                        field.opaque = true;
                        Ok(())
                    } else if meta.path.is_ident("range") {
                        field.range = Some(meta.value()?.parse()?);
                        Ok(())
                    } else {
                        Err(meta.error("expected `default = <expr>`, `range = <range>` or `opaque`"))
                    }
                })?;
            }
            if field.opaque && field.range.is_some() {
                let msg = "an `opaque` field has no value to check against a `range`";
                return Err(syn::Error::new_spanned(&f.ty, msg));
            }
            if field.opaque && !field.category.is_host() {
                let msg = "only a Host field can be `opaque`: GraphConst and Device values must have a config form";
                return Err(syn::Error::new_spanned(&f.ty, msg));
            }
            Ok(field)
        })
        .collect()
}

/// The struct-level `#[experiment(presets = path)]`.
pub fn presets_path(input: &DeriveInput) -> syn::Result<Option<syn::Path>> {
    let mut path = None;
    for attr in input
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("experiment"))
    {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("presets") {
                path = Some(meta.value()?.parse()?);
                Ok(())
            } else {
                Err(meta.error("expected `presets = <path to fn() -> Vec<Preset>>`"))
            }
        })?;
    }
    Ok(path)
}

/// The markdown marker table appended to the struct's docs.
pub fn table(fields: &[Field]) -> String {
    let mut out =
        String::from("\n\n# Fields\n\n| field | category | type | default |\n|---|---|---|---|\n");
    for f in fields {
        let default = match &f.default {
            Some(e) => format!("`{}`", type_text(e)),
            None => "`Default::default()`".into(),
        };
        let ty = type_text(&f.inner).replace('|', "\\|");
        out += &format!(
            "| `{}` | {} | `{}` | {} |\n",
            f.name(),
            f.category.label(),
            ty,
            default.replace('|', "\\|")
        );
    }
    out
}

/// Whether `tokens` mention any of `params` (a generic field needs where-bounds).
pub fn mentions(tokens: &impl ToTokens, params: &[Ident]) -> bool {
    fn walk(ts: TokenStream, params: &[Ident]) -> bool {
        ts.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => params.contains(&i),
            proc_macro2::TokenTree::Group(g) => walk(g.stream(), params),
            _ => false,
        })
    }
    walk(tokens.to_token_stream(), params)
}

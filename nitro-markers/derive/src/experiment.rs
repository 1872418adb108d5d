//! `#[derive(Experiment)]`: the `ExperimentFields` impl and the compile view.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{DeriveInput, GenericParam, Ident};

use crate::model::{mentions, parse_fields, presets_path, table, Category, Field};

pub fn marker_table(mut input: DeriveInput) -> syn::Result<TokenStream> {
    let fields = parse_fields(&input)?;
    let doc = table(&fields);
    input.attrs.push(syn::parse_quote!(#[doc = #doc]));
    Ok(quote!(#input))
}

pub fn derive(input: DeriveInput) -> syn::Result<TokenStream> {
    let fields = parse_fields(&input)?;
    let name = &input.ident;
    let name_str = name.to_string();
    let vis = &input.vis;
    let m = quote!(::nitro_markers);
    let view = format_ident!("{}View", name);
    let host_mod = format_ident!("__nitro_host_fields_{}", name);

    let mut params = Vec::new();
    let mut type_params = Vec::new();
    for p in &input.generics.params {
        match p {
            GenericParam::Type(t) => {
                params.push(t.ident.clone());
                type_params.push(t.ident.clone());
            }
            GenericParam::Const(c) => params.push(c.ident.clone()),
            GenericParam::Lifetime(l) => {
                let msg = "an experiment cannot borrow: it outlives every hook call; own the value instead";
                return Err(syn::Error::new_spanned(l, msg));
            }
        }
    }
    let (impl_g, ty_g, where_clause) = input.generics.split_for_impl();
    let mut preds: Vec<TokenStream> = where_clause
        .map(|w| w.predicates.iter().map(|p| quote!(#p)).collect())
        .unwrap_or_default();
    for f in fields.iter().filter(|f| mentions(&f.ty, &type_params)) {
        let (ty, inner) = (&f.ty, &f.inner);
        let span = ty.span();
        if !f.opaque {
            preds.push(quote_spanned!(span=> #ty: #m::ConfigField));
        }
        if f.default.is_none() {
            preds.push(quote_spanned!(span=> #ty: ::core::default::Default));
        }
        if f.category == Category::GraphConst {
            preds.push(quote_spanned!(span=> #inner: ::core::clone::Clone));
        }
    }
    let where_all = quote!(where #(#preds,)*);

    let names = |pred: &dyn Fn(&Field) -> bool| -> Vec<String> {
        fields.iter().filter(|f| pred(f)).map(Field::name).collect()
    };
    let all_names = names(&|_| true);
    let device_names = names(&|f| f.category == Category::Device);
    let host_names = names(&|f| f.category.is_host());

    // The compile view.
    let host_idents: Vec<&Ident> = fields
        .iter()
        .filter(|f| f.category.is_host())
        .map(|f| &f.ident)
        .collect();
    let view_fields = fields.iter().map(|f| {
        let (ident, inner) = (&f.ident, &f.inner);
        let doc = match f.doc.as_str() {
            "" => format!("`{}` ({}).", f.name(), f.category.label()),
            doc => doc.to_string(),
        };
        let ty = match f.category {
            Category::GraphConst => quote!(#inner),
            Category::Device => quote!(__NitroT),
            _ => quote!(#m::StrippedHost<#host_mod::#ident>),
        };
        quote!(#[doc = #doc] pub #ident: #ty)
    });
    let view_inits = fields.iter().map(|f| {
        let ident = &f.ident;
        let name = f.name();
        match f.category {
            Category::GraphConst => quote!(#ident: ::core::clone::Clone::clone(&self.#ident.0)),
            Category::Device => quote!(#ident: device(#name)),
            _ => quote!(#ident: #m::StrippedHost::new()),
        }
    });
    let phantom_ty = quote!(::core::marker::PhantomData<fn() -> (__NitroT, #(#type_params,)*)>);
    let view_params = input.generics.params.iter();
    let view_where = input.generics.where_clause.as_ref();
    let table_doc = table(&fields);
    let view_doc = format!("The compile view of [`{name_str}`]: what traced code sees.{table_doc}");

    let defaults = fields.iter().map(|f| {
        let (ident, ty) = (&f.ident, &f.ty);
        match (&f.default, f.category) {
            (None, _) => quote_spanned!(ty.span()=> #ident: ::core::default::Default::default()),
            (Some(e), Category::GraphConst) => quote!(#ident: #m::GraphConst(#e)),
            (Some(e), Category::Device) => quote!(#ident: #m::Device(#e)),
            (Some(e), Category::MarkedHost) => quote!(#ident: #m::Host(#e)),
            (Some(e), Category::Host) => quote!(#ident: { let v: #ty = #e; v }),
        }
    });

    let get_arms = fields.iter().map(|f| {
        let (ident, name, ty) = (&f.ident, f.name(), &f.ty);
        if f.opaque {
            quote!(#name => ::core::result::Result::Ok(#m::ConfigValue::Opaque(::core::any::type_name::<#ty>().into())))
        } else {
            quote!(#name => ::core::result::Result::Ok(#m::ConfigField::to_config(&self.#ident)))
        }
    });
    let set_arms = fields.iter().map(|f| {
        let (ident, name, ty) = (&f.ident, f.name(), &f.ty);
        if f.opaque {
            quote!(#name => ::core::result::Result::Err(#m::ConfigError::NotConfigurable {
                field: #name.into(), type_name: ::core::any::type_name::<#ty>().into() }))
        } else {
            quote!(#name => {
                self.#ident = <#ty as #m::ConfigField>::from_config(value)
                    .map_err(|e| #m::ConfigError::bad_value(#name, value, e))?;
                ::core::result::Result::Ok(())
            })
        }
    });
    let text_arms = fields.iter().filter(|f| !f.opaque).map(|f| {
        let (ident, name, ty) = (&f.ident, f.name(), &f.ty);
        quote!(#name => {
            self.#ident = <#ty as #m::ConfigField>::parse_text(text).map_err(|e| #m::ConfigError::BadValue {
                field: #name.into(), value: text.into(), expected: e.expected, reason: ::std::format!("found {}", e.found),
            })?;
            ::core::result::Result::Ok(())
        })
    });
    let devices: Vec<&Field> = fields
        .iter()
        .filter(|f| f.category == Category::Device)
        .collect();
    let device_vals = devices.iter().map(|f| {
        let (ident, name) = (&f.ident, f.name());
        quote!((#name, #m::DeviceInput::to_device_value(&self.#ident.0)))
    });
    let device_set_arms = devices.iter().map(|f| {
        let (ident, name, inner) = (&f.ident, f.name(), &f.inner);
        quote!(#name => {
            self.#ident.0 = <#inner as #m::DeviceInput>::from_device_value(value).map_err(|e| #m::ConfigError::BadValue {
                field: #name.into(), value: ::std::format!("{:?}", value.shape), expected: e.expected, reason: ::std::format!("found {}", e.found),
            })?;
            ::core::result::Result::Ok(())
        })
    });
    let meta_rows = fields.iter().map(|f| {
        let (ident, name, ty, doc) = (&f.ident, f.name(), &f.ty, &f.doc);
        let cat = format_ident!("{}", f.category.label());
        let type_name = if f.opaque {
            quote!(::core::any::type_name::<#ty>().into())
        } else {
            quote!(<#ty as #m::ConfigField>::type_name())
        };
        let value = if f.opaque {
            quote!(#m::ConfigValue::Opaque(::core::any::type_name::<#ty>().into()))
        } else {
            quote!(#m::ConfigField::to_config(&self.#ident))
        };
        quote!(#m::FieldMeta { name: #name, category: #m::Category::#cat, type_name: #type_name, value: #value, doc: #doc })
    });
    let range_checks = fields.iter().filter_map(|f| {
        let range = f.range.as_ref()?;
        let (ident, name) = (&f.ident, f.name());
        let text = quote!(#range).to_string().replace(' ', "");
        let value = match f.category {
            Category::Host => quote!(&self.#ident),
            _ => quote!(&self.#ident.0),
        };
        Some(quote!(#m::check_range(#name, #value, #range, #text)?;))
    });
    let presets =
        presets_path(&input)?.map(|p| quote!(fn presets() -> ::std::vec::Vec<#m::Preset> { #p() }));
    let impl_doc = format!("Generated by `#[derive(Experiment)]`.{table_doc}");

    Ok(quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types, non_snake_case)]
        #vis mod #host_mod {
            #(
                #[doc = concat!("The Host field `", stringify!(#host_idents), "`, stripped from the compile view.")]
                #[derive(Debug, Clone, Copy)]
                pub struct #host_idents;
                impl ::nitro_markers::HostFieldName for #host_idents {
                    const NAME: &'static str = stringify!(#host_idents);
                }
            )*
        }

        #[doc = #view_doc]
        #[derive(Clone)]
        #vis struct #view<#(#view_params,)* __NitroT> #view_where {
            #(#view_fields,)*
            #[doc(hidden)]
            pub __nitro_marker: #phantom_ty,
        }

        #[doc = #impl_doc]
        impl #impl_g #m::ExperimentFields for #name #ty_g #where_all {
            type View<__NitroT> = #view<#(#params,)* __NitroT>;

            fn experiment_name() -> &'static str { #name_str }
            fn field_names() -> &'static [&'static str] { &[#(#all_names),*] }
            fn device_fields() -> &'static [&'static str] { &[#(#device_names),*] }
            fn host_fields() -> &'static [&'static str] { &[#(#host_names),*] }
            fn defaults() -> Self { Self { #(#defaults,)* } }

            fn get_field(&self, name: &str) -> ::core::result::Result<#m::ConfigValue, #m::ConfigError> {
                match name {
                    #(#get_arms,)*
                    _ => ::core::result::Result::Err(#m::unknown_field::<Self>(name)),
                }
            }

            fn set_field(&mut self, name: &str, value: &#m::ConfigValue) -> ::core::result::Result<(), #m::ConfigError> {
                match name {
                    #(#set_arms,)*
                    _ => ::core::result::Result::Err(#m::unknown_field::<Self>(name)),
                }
            }

            fn set_field_text(&mut self, name: &str, text: &str) -> ::core::result::Result<(), #m::ConfigError> {
                match name {
                    #(#text_arms,)*
                    _ => {
                        let value = #m::ConfigValue::Str(text.into());
                        self.set_field(name, &value)
                    }
                }
            }

            fn device_values(&self) -> ::std::vec::Vec<(&'static str, #m::DeviceValue)> {
                ::std::vec![#(#device_vals),*]
            }

            fn set_device_value(&mut self, name: &str, value: &#m::DeviceValue) -> ::core::result::Result<(), #m::ConfigError> {
                #[allow(unused_variables)]
                let value = value;
                match name {
                    #(#device_set_arms,)*
                    _ => ::core::result::Result::Err(match <Self as #m::ExperimentFields>::category(name) {
                        ::core::option::Option::Some(c) => #m::ConfigError::not_device(name, c),
                        ::core::option::Option::None => #m::unknown_field::<Self>(name),
                    }),
                }
            }

            fn config_metadata(&self) -> ::std::vec::Vec<#m::FieldMeta> {
                ::std::vec![#(#meta_rows),*]
            }

            fn check_ranges(&self) -> ::core::result::Result<(), #m::ConfigError> {
                #(#range_checks)*
                ::core::result::Result::Ok(())
            }

            #[allow(unused_mut, unused_variables)]
            fn compile_view<__NitroT>(&self, mut device: impl FnMut(&'static str) -> __NitroT) -> Self::View<__NitroT> {
                #view { #(#view_inits,)* __nitro_marker: ::core::marker::PhantomData }
            }

            #presets
        }
    })
}

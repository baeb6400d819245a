//! Parameters declared once: [`args!`](crate::args!) declares a tool's argument type and,
//! from the same lines, the manifest `parameters` list the model reads.
//!
//! ```
//! executa::args! {
//!     /// Where to ship.
//!     pub struct Address {
//!         /// Street and number
//!         pub street: String,
//!         /// City name
//!         pub city: String,
//!     }
//!
//!     /// How fast to ship.
//!     pub enum Speed { Normal = "normal", Express = "express" }
//!
//!     /// The `order` tool's arguments.
//!     pub struct OrderArgs {
//!         /// Article number
//!         pub sku: String,
//!         /// How many
//!         pub quantity: u32 = 1,
//!         /// Shipping speed
//!         pub speed: Speed = Speed::Normal,
//!         /// Gift note, if any
//!         pub note: Option<String>,
//!         /// Delivery address
//!         pub address: Address,
//!         /// Labels to print on the box
//!         pub labels: Vec<String>,
//!     }
//! }
//!
//! use executa::Args;
//! let params = OrderArgs::params();
//! assert_eq!(params[1].default, Some(serde_json::json!(1)));
//! assert!(!params[3].required);
//! assert_eq!(params[4].properties.as_ref().map(Vec::len), Some(2));
//! ```
//!
//! A tool's result type is declared the same way: an `args!` struct that also derives
//! `serde::Serialize`, named with [`Tool::returns`](crate::Tool::returns), publishes its
//! fields as the manifest's `returns` list and the tool's MCP `outputSchema`.
//!
//! Why a declarative macro and not a derive: a derive needs a proc-macro crate (`syn`,
//! `quote`, build time for every plugin); `macro_rules!` costs nothing to compile and keeps
//! the crate's dependency list as it is. What it cannot see (serde attributes such as
//! `rename`) it does not accept on fields, so the names it publishes are the names serde
//! reads; the compile error says what to write instead. Struct-level attributes pass
//! through: `#[serde(deny_unknown_fields)]` makes an unknown argument key a -32602 error.
//! A field without a doc comment is published with an empty description, which the
//! plugin's start-up check and `executa check` warn about.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::manifest::{Param, ParamType};

/// An argument type whose manifest parameter list is known: implemented by [`args!`](crate::args!)
/// structs; give it to [`Tool::typed`](crate::Tool::typed), or name it as a result type
/// with [`Tool::returns`](crate::Tool::returns).
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no parameter list for `Tool::typed` or `Tool::returns`",
    label = "not declared with `executa::args!`",
    note = "declare `{Self}` inside `executa::args! {{ ... }}` (it derives `Deserialize` and the \
            parameter list from the same lines), or use `Tool::new` with a `.param(...)` list"
)]
pub trait Args {
    /// The tool's `parameters`, one per field, in declaration order.
    fn params() -> Vec<Param>;
}

/// A Rust type that maps to a parameter type: strings, numbers, booleans, `Option<T>`
/// (optional), `Vec<T>` (an array with item type), [`args!`](crate::args!) structs (objects with
/// properties) and enums (strings with an `enum` list).
// Said for every type the field may have, a map as well as the author's own struct: a
// diagnostic attribute cannot pick its note by type.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the type of an `args!` field: it has no parameter schema",
    label = "no parameter schema for this type",
    note = "a field's type is a string, a number, `bool`, `Option<T>`, `Vec<T>`, a type \
            declared in an `executa::args! {{ ... }}` block, or \
            `serde_json::Map<String, serde_json::Value>`: a free-form object, in place of a \
            `HashMap` or a `BTreeMap`",
    note = "a struct or enum of your own goes inside the `executa::args! {{ ... }}` block \
            instead of `#[derive(Deserialize)]`: a struct with doc-commented fields, or a \
            string enum `enum Speed {{ Normal = \"normal\" }}`"
)]
pub trait ParamSchema {
    /// Whether the field may be left out (true for `Option`).
    const OPTIONAL: bool = false;
    /// Sets the type and its details (`items`, `properties`, `enum`) on `p`.
    fn describe(p: &mut Param);
}

macro_rules! scalar {
    ($kind:ident: $($t:ty),*) => {$(
        impl ParamSchema for $t {
            fn describe(p: &mut Param) {
                p.kind = ParamType::$kind;
            }
        }
    )*};
}

scalar!(String: String, char);
scalar!(Integer: i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
scalar!(Number: f32, f64);
scalar!(Boolean: bool);
scalar!(Object: Map<String, Value>);

impl<T: ParamSchema> ParamSchema for Option<T> {
    const OPTIONAL: bool = true;
    fn describe(p: &mut Param) {
        T::describe(p);
    }
}

impl<T: ParamSchema> ParamSchema for Vec<T> {
    fn describe(p: &mut Param) {
        p.kind = ParamType::Array;
        let mut item = Param::new("", ParamType::String, "");
        T::describe(&mut item);
        p.items = Some(item_schema(item));
    }
}

/// The JSON-Schema-like `items` object of an array: its type and, when present, its `enum`,
/// `items` and (list-form) `properties`.
fn item_schema(item: Param) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), item.kind.as_str().into());
    if let Some(allowed) = item.allowed {
        m.insert("enum".into(), Value::Array(allowed));
    }
    if let Some(items) = item.items {
        m.insert("items".into(), items);
    }
    if let Some(props) = item.properties {
        m.insert("properties".into(), params_json(&props));
    }
    Value::Object(m)
}

/// Fills in defaults the caller left out, at every level the list describes (nested
/// objects, and object items of arrays), so a default declared once reaches the handler.
/// `params` is the published JSON list: one walker serves both levels, and no parameter
/// list is parsed back per invoke.
pub(crate) fn apply_defaults(args: &mut Map<String, Value>, params: &Value) {
    let Some(params) = params.as_array() else {
        return;
    };
    for p in params {
        let Some(name) = p.get("name").and_then(Value::as_str) else {
            continue;
        };
        match args.get_mut(name) {
            None | Some(Value::Null) => {
                if let Some(d) = p.get("default") {
                    args.insert(name.to_owned(), d.clone());
                }
            }
            Some(Value::Object(inner)) => {
                if let Some(props) = p.get("properties") {
                    apply_defaults(inner, props);
                }
            }
            Some(Value::Array(elems)) => {
                if let Some(props) = p.get("items").and_then(|i| i.get("properties")) {
                    for e in elems.iter_mut().filter_map(Value::as_object_mut) {
                        apply_defaults(e, props);
                    }
                }
            }
            Some(_) => {}
        }
    }
}

/// A parameter list as JSON. Through text rather than `serde_json::to_value`: the text
/// serializer is in every plugin already, the `Value` one would add its own copy of
/// `Param`'s (recursive) serialization.
pub(crate) fn params_json(params: &[Param]) -> Value {
    serde_json::to_string(params)
        .and_then(|text| serde_json::from_str(&text))
        .unwrap_or(Value::Array(Vec::new()))
}

/// Whether any parameter of the JSON list, at any depth, has a default.
pub(crate) fn has_defaults(params: &Value) -> bool {
    params.as_array().is_some_and(|list| {
        list.iter()
            .any(|p| p.get("default").is_some() || has_nested_defaults(p))
    })
}

/// Whether one parameter declares defaults inside the object (`properties`) or the array
/// items (`items.properties`) it takes, which [`apply_defaults`] fills in a given value.
pub(crate) fn has_nested_defaults(p: &Value) -> bool {
    p.get("properties").is_some_and(has_defaults)
        || p.get("items")
            .and_then(|i| i.get("properties"))
            .is_some_and(has_defaults)
}

/// Where a hand-written parameter list and the args type disagree: one line per
/// difference in names, `required` and defaults.
pub(crate) fn disagreements(tool: &str, manual: &[Param], declared: &[Param]) -> Vec<String> {
    let mut out = Vec::new();
    for d in declared {
        let Some(m) = manual.iter().find(|m| m.name == d.name) else {
            out.push(format!(
                "tool `{tool}`: field `{}` of the args type is missing from the .param(...) list",
                d.name
            ));
            continue;
        };
        if m.required != d.required {
            out.push(format!(
                "tool `{tool}`: parameter `{}` is {} in .param(...) but {} in the args type",
                d.name,
                required_word(m.required),
                required_word(d.required)
            ));
        }
        // Compared as JSON text: one serializer already in every plugin, no `Value` equality.
        if shown(&m.default) != shown(&d.default) {
            out.push(format!(
                "tool `{tool}`: parameter `{}` has default {} in .param(...) but {} in the args type",
                d.name,
                shown(&m.default),
                shown(&d.default)
            ));
        }
    }
    for m in manual
        .iter()
        .filter(|m| declared.iter().all(|d| d.name != m.name))
    {
        out.push(format!(
            "tool `{tool}`: parameter `{}` in .param(...) is not a field of the args type",
            m.name
        ));
    }
    out
}

/// The start-up check of one [`Tool::new`](crate::Tool::new) tool: adds to `problems` a
/// line for each field its args type reads that its parameter list (the second argument)
/// leaves out. A `fn` pointer made in `Tool::new`, so a plugin whose tools are all
/// [`Tool::typed`](crate::Tool::typed) (complete lists by construction) holds none of it.
pub(crate) type Unpublished = fn(&str, &[Param], &mut Vec<String>);

/// The field names `A` reads (`FIELDS` of its derived `Deserialize`), or none when it is
/// not a plain struct (a `Value`, a map, an enum): a derived struct `Deserialize` hands its field list to
/// `deserialize_struct`, which [`Introspect`] keeps before refusing; anything else is
/// refused without a list. Nothing is parsed, and only `deserialize_struct` and
/// `deserialize_any` are instantiated per type.
pub(crate) fn field_names<A: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = A::deserialize(Introspect(&mut fields));
    fields
}

/// Adds to `problems` a line for each of the args type's `fields` that `published` does
/// not list: what the model would never be told about.
pub(crate) fn unpublished(
    tool: &str,
    fields: &[&str],
    published: &[Param],
    problems: &mut Vec<String>,
) {
    for field in fields {
        if published.iter().all(|p| p.name != *field) {
            problems.push(format!(
                "tool `{tool}`: field `{field}` of its args type is not published: declare the \
                 type with `args!` and use `Tool::typed`, or add `.param(...)`"
            ));
        }
    }
}

struct Introspect<'a>(&'a mut &'static [&'static str]);

impl<'de> serde::Deserializer<'de> for Introspect<'_> {
    type Error = serde_json::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(serde::de::Error::custom("introspected"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

fn required_word(required: bool) -> &'static str {
    if required { "required" } else { "optional" }
}

fn shown(v: &Option<Value>) -> String {
    match v {
        Some(v) => serde_json::to_string(v).unwrap_or_default(),
        None => "none".to_owned(),
    }
}

/// Support for the macro's expansion; not a public API.
#[doc(hidden)]
pub mod __private {
    use super::*;

    /// One field's parameter. `name` is the field as written: a raw identifier
    /// (`r#type`) is published as serde reads it (`type`).
    pub fn field<T: ParamSchema>(name: &str, docs: &[&str], default: Option<Value>) -> Param {
        build(name, docs, default, T::describe, T::OPTIONAL)
    }

    // Not generic, so a plugin's binary holds one copy however many field types it uses.
    fn build(
        name: &str,
        docs: &[&str],
        default: Option<Value>,
        describe: fn(&mut Param),
        optional: bool,
    ) -> Param {
        let mut description = String::new();
        for line in docs.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
            if !description.is_empty() {
                description.push(' ');
            }
            description.push_str(line);
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        let mut p = Param::new(name, ParamType::String, description);
        describe(&mut p);
        p.required = !optional && default.is_none();
        p.default = default;
        p
    }

    /// An object parameter's details: type and properties.
    pub fn object<A: Args>(p: &mut Param) {
        p.kind = ParamType::Object;
        p.properties = Some(A::params());
    }

    /// A string enum's details.
    pub fn string_enum(p: &mut Param, values: &[&str]) {
        p.kind = ParamType::String;
        p.allowed = Some(values.iter().map(|v| Value::from(*v)).collect());
    }

    /// A value usable as the default of a field of type `T`: a `T`, or a `&str` for a
    /// `String` field (so `name: String = "x"` reads naturally).
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is not a default for an `args!` field of type `{T}`",
        label = "write the default as a `{T}` value",
        note = "a default is a value of the field's own type: for an `args!` enum the variant \
                (`Speed::Normal`), not its wire string (`\"normal\"`); a string literal is \
                accepted only for `String` fields"
    )]
    pub trait DefaultFor<T> {
        /// The value, serializable.
        fn serialize_as(&self) -> Result<String, serde_json::Error>;
    }

    impl<T: Serialize> DefaultFor<T> for T {
        fn serialize_as(&self) -> Result<String, serde_json::Error> {
            serde_json::to_string(self)
        }
    }

    impl DefaultFor<String> for &str {
        fn serialize_as(&self) -> Result<String, serde_json::Error> {
            serde_json::to_string(self)
        }
    }

    /// A default as JSON, type-checked against the field's type `T`.
    pub fn default_value<T>(v: impl DefaultFor<T>) -> Value {
        v.serialize_as()
            .and_then(|text| serde_json::from_str(&text))
            .unwrap_or(Value::Null)
    }
}

/// Declares argument structs and string enums together with their manifest parameters.
///
/// Each struct gets `#[derive(serde::Deserialize)]` (the plugin crate depends on `serde`
/// with the `derive` feature) and implements [`Args`] and [`ParamSchema`]; each enum of
/// `Variant = "wire"` pairs gets `Deserialize` and `Serialize` and an `enum` list. A
/// field's doc comment is its description; `Option<T>` makes it optional; `= value` gives
/// it a default, published in the manifest and filled in before the handler's arguments
/// are deserialized. A field is published under its own name (`r#type` as `type`).
/// Fields take doc comments only; struct attributes pass through (a result type for
/// [`Tool::returns`](crate::Tool::returns) adds `#[derive(serde::Serialize)]`). A mistake
/// (a field attribute, a variant without its wire string) is a compile error naming the
/// fix. See the [module docs](mod@crate::args) for an example.
#[macro_export]
macro_rules! args {
    () => {};
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $fvis:vis $field:ident : $ty:ty $(= $default:expr)?
            ),* $(,)?
        }
        $($rest:tt)*
    ) => {
        #[derive(::serde::Deserialize)]
        $(#[$meta])*
        $vis struct $name {
            $( $(#[doc = $doc])* $fvis $field: $ty, )*
        }

        impl $crate::Args for $name {
            fn params() -> ::std::vec::Vec<$crate::Param> {
                ::std::vec![$(
                    $crate::args::__private::field::<$ty>(
                        stringify!($field),
                        &[$($doc),*],
                        $crate::__args_default!($ty $(, $default)?),
                    )
                ),*]
            }
        }

        impl $crate::ParamSchema for $name {
            fn describe(p: &mut $crate::Param) {
                $crate::args::__private::object::<Self>(p)
            }
        }

        $crate::args! { $($rest)* }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[doc = $doc:literal])* $variant:ident = $wire:literal ),* $(,)?
        }
        $($rest:tt)*
    ) => {
        #[derive(::serde::Deserialize, ::serde::Serialize)]
        $(#[$meta])*
        $vis enum $name {
            $( $(#[doc = $doc])* #[serde(rename = $wire)] $variant, )*
        }

        impl $crate::ParamSchema for $name {
            fn describe(p: &mut $crate::Param) {
                $crate::args::__private::string_enum(p, &[$($wire),*])
            }
        }

        $crate::args! { $($rest)* }
    };
    // The mistakes. Each arm below takes what the two above refuse, says what is wrong and
    // how to fix it, and still declares the type (without what it refused), so that the
    // author reads that message and not one more for each use of the type.
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$($fattr:tt)*])*
                $fvis:vis $field:ident : $ty:ty $(= $default:expr)?
            ),* $(,)?
        }
        $($rest:tt)*
    ) => {
        $( $( $crate::__args_field_attr! { $name $field [$($fattr)*] } )* )*

        #[derive(::serde::Deserialize)]
        $(#[$meta])*
        $vis struct $name {
            $( $fvis $field: $ty, )*
        }

        impl $crate::Args for $name {
            fn params() -> ::std::vec::Vec<$crate::Param> {
                ::std::vec::Vec::new()
            }
        }

        impl $crate::ParamSchema for $name {
            fn describe(p: &mut $crate::Param) {
                $crate::args::__private::object::<Self>(p)
            }
        }

        $crate::args! { $($rest)* }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident { $($body:tt)* }
        $($rest:tt)*
    ) => {
        $crate::__args_variants! { $name [$(#[$meta])* $vis enum $name] [] $($body)* }

        $crate::args! { $($rest)* }
    };
}

/// A field's default for [`args!`](crate::args!): `None`, or the value as JSON.
#[doc(hidden)]
#[macro_export]
macro_rules! __args_default {
    ($ty:ty) => {
        ::std::option::Option::None
    };
    ($ty:ty, $default:expr) => {
        ::std::option::Option::Some($crate::args::__private::default_value::<$ty>($default))
    };
}

/// Says why an attribute of an [`args!`](crate::args!) field is refused, and the fix.
#[doc(hidden)]
#[macro_export]
macro_rules! __args_field_attr {
    ($name:ident $field:ident [doc = $doc:literal]) => {};
    ($name:ident $field:ident [serde (rename = $wire:literal $($more:tt)*)]) => {
        ::std::compile_error!(::std::concat!(
            "`args!` field `", ::std::stringify!($name), ".", ::std::stringify!($field),
            "`: `#[serde(rename)]` is not accepted: the manifest publishes the field's own \
             name, so serde must read that name: name the field `", $wire, "` (with \
             `#[allow(non_snake_case)]` on the struct for a camelCase name; a keyword as \
             `r#type`), or declare the type with `#[derive(Deserialize)]` and list its \
             parameters with `Tool::new(...).param(...)`"
        ));
    };
    ($name:ident $field:ident [serde (default $($more:tt)*)]) => {
        ::std::compile_error!(::std::concat!(
            "`args!` field `", ::std::stringify!($name), ".", ::std::stringify!($field),
            "`: `#[serde(default)]` is not accepted: write the default after the type, `",
            ::std::stringify!($field), ": T = value`, so that the manifest publishes it, or \
             make the field an `Option<T>`"
        ));
    };
    ($name:ident $field:ident [serde $($more:tt)*]) => {
        ::std::compile_error!(::std::concat!(
            "`args!` field `", ::std::stringify!($name), ".", ::std::stringify!($field),
            "`: `#[serde", ::std::stringify!($($more)*), "]` is not accepted: the manifest \
             could not show what it changes: remove it, or declare the type with \
             `#[derive(Deserialize)]` and list its parameters with `Tool::new(...).param(...)`"
        ));
    };
    ($name:ident $field:ident [$($attr:tt)*]) => {
        ::std::compile_error!(::std::concat!(
            "`args!` field `", ::std::stringify!($name), ".", ::std::stringify!($field),
            "`: `#[", ::std::stringify!($($attr)*), "]` is not accepted: fields take only \
             `///` doc comments (the parameter's description); attributes on the struct \
             pass through to it"
        ));
    };
}

/// Walks the variants of an [`args!`](crate::args!) enum that the macro refused, naming
/// each one that is not `Variant = "wire"`, then declares the enum with the variants that
/// are.
#[doc(hidden)]
#[macro_export]
macro_rules! __args_variants {
    ($name:ident [$($head:tt)*] [$($done:ident)*]) => {
        #[derive(::serde::Deserialize, ::serde::Serialize)]
        $($head)* { $($done,)* }

        impl $crate::ParamSchema for $name {
            fn describe(p: &mut $crate::Param) {
                $crate::args::__private::string_enum(p, &[])
            }
        }
    };
    (
        $name:ident [$($head:tt)*] [$($done:ident)*]
        $(#[doc = $doc:literal])* $variant:ident = $wire:literal $(, $($rest:tt)*)?
    ) => {
        $crate::__args_variants! { $name [$($head)*] [$($done)* $variant] $($($rest)*)? }
    };
    (
        $name:ident [$($head:tt)*] [$($done:ident)*]
        $(#[doc = $doc:literal])* $variant:ident $data:tt $(, $($rest:tt)*)?
    ) => {
        ::std::compile_error!(::std::concat!(
            "`args!` enum `", ::std::stringify!($name), "`: variant `",
            ::std::stringify!($variant), "` carries data: an `args!` enum is a string enum \
             (`Variant = \"wire\"`); put the data in a field of an `args!` struct"
        ));
        $crate::__args_variants! { $name [$($head)*] [$($done)*] $($($rest)*)? }
    };
    (
        $name:ident [$($head:tt)*] [$($done:ident)*]
        $(#[doc = $doc:literal])* $variant:ident $(, $($rest:tt)*)?
    ) => {
        ::std::compile_error!(::std::concat!(
            "`args!` enum `", ::std::stringify!($name), "`: variant `",
            ::std::stringify!($variant), "` has no wire string: write `",
            ::std::stringify!($variant), " = \"...\"` with the string the model sends (the \
             manifest lists it in the parameter's `enum`)"
        ));
        $crate::__args_variants! { $name [$($head)*] [$($done)* $variant] $($($rest)*)? }
    };
    ($name:ident [$($head:tt)*] [$($done:ident)*] #[doc = $doc:literal] $($rest:tt)*) => {
        $crate::__args_variants! { $name [$($head)*] [$($done)*] $($rest)* }
    };
    ($name:ident [$($head:tt)*] [$($done:ident)*] #[$($attr:tt)*] $($rest:tt)*) => {
        ::std::compile_error!(::std::concat!(
            "`args!` enum `", ::std::stringify!($name), "`: `#[",
            ::std::stringify!($($attr)*), "]` is not accepted on a variant: variants take \
             only `///` doc comments and their wire string, `Variant = \"wire\"`"
        ));
        $crate::__args_variants! { $name [$($head)*] [$($done)*] $($rest)* }
    };
    ($name:ident [$($head:tt)*] [$($done:ident)*] $($other:tt)+) => {
        ::std::compile_error!(::std::concat!(
            "`args!` enum `", ::std::stringify!($name), "`: expected variants of the form \
             `Variant = \"wire\"`, separated by commas, at `", ::std::stringify!($($other)+),
            "`"
        ));
        $crate::__args_variants! { $name [$($head)*] [$($done)*] }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    crate::args! {
        /// Nested.
        struct Line {
            /// Article
            sku: String,
            /// How many
            qty: u32 = 1,
        }

        enum Mode { Fast = "fast", Slow = "slow" }

        #[serde(deny_unknown_fields)]
        struct Order {
            /// The
            /// lines
            lines: Vec<Line>,
            /// Speed
            mode: Mode = Mode::Slow,
            /// Note
            note: Option<String>,
            /// Score
            score: f64,
        }
    }

    #[test]
    fn the_list_comes_from_the_type() {
        let v = serde_json::to_value(Order::params()).unwrap_or_default();
        assert_eq!(
            v,
            json!([
                {"name": "lines", "type": "array", "description": "The lines", "required": true,
                 "items": {"type": "object", "properties": [
                    {"name": "sku", "type": "string", "description": "Article", "required": true},
                    {"name": "qty", "type": "integer", "description": "How many", "required": false, "default": 1}
                 ]}},
                {"name": "mode", "type": "string", "description": "Speed", "required": false,
                 "default": "slow", "enum": ["fast", "slow"]},
                {"name": "note", "type": "string", "description": "Note", "required": false},
                {"name": "score", "type": "number", "description": "Score", "required": true}
            ])
        );
    }

    crate::args! {
        /// A keyword as a field name.
        struct Raw {
            /// The kind
            r#type: String,
        }
    }

    #[test]
    fn a_raw_field_name_is_published_as_serde_reads_it() {
        let params = Raw::params();
        assert_eq!(params[0].name, "type");
        let raw: Raw = match serde_json::from_value(json!({"type": "a"})) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(raw.r#type, "a");
    }

    #[test]
    fn defaults_reach_every_level() {
        let params = serde_json::to_value(Order::params()).unwrap_or_default();
        assert!(has_defaults(&params));
        let mut args = json!({"lines": [{"sku": "a"}, {"sku": "b", "qty": 7}], "score": 1.5});
        if let Some(m) = args.as_object_mut() {
            apply_defaults(m, &params);
        }
        let order: Order = match serde_json::from_value(args) {
            Ok(o) => o,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(order.lines[0].qty, 1);
        assert_eq!(order.lines[1].qty, 7);
        assert!(matches!(order.mode, Mode::Slow));
        assert!(order.note.is_none());
        assert_eq!(order.score, 1.5);
        assert_eq!(order.lines[1].sku, "b");
        assert!(matches!(Mode::Fast, Mode::Fast));
    }

    #[test]
    fn a_hand_list_that_disagrees_is_named() {
        let manual = vec![
            Param::array("lines", ParamType::Object, "l"),
            Param::string("mode", "m").default_value("fast"),
            Param::string("note", "n"),
            Param::integer("quantity", "q").optional(),
        ];
        let found = disagreements("order", &manual, &Order::params());
        assert_eq!(
            found,
            vec![
                "tool `order`: parameter `mode` has default \"fast\" in .param(...) but \"slow\" in the args type",
                "tool `order`: parameter `note` is required in .param(...) but optional in the args type",
                "tool `order`: field `score` of the args type is missing from the .param(...) list",
                "tool `order`: parameter `quantity` in .param(...) is not a field of the args type",
            ]
        );
    }
}

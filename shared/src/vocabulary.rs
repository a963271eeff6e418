//! Enums whose values are names: in the output, on the wire, in the journal. Each name is
//! written once, in the enum's declaration; its text, parsing, `Display` and serde all come
//! from there.

/// Declares an enum with its names: `Variant` is named as written, `Variant = "text"` by the
/// text. After a `;`, `Wrapper(Inner)` variants take the names of other such enums (which
/// share no name with this one).
/// Gives `ALL` and `NAMES` (the enum's own), `as_str`, `parse` and `Display`.
#[macro_export]
macro_rules! named {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident $(= $text:literal)? ),+ $(,)?
        }
    ) => {
        $crate::named!(@build [$(#[$meta])*] $vis $name
            [$( [$(#[$variant_meta])*] $variant [$($text)?] )+] []);
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident $(= $text:literal)? ),+ ;
            $( $(#[$wrapper_meta:meta])* $wrapper:ident($inner:ty) ),+ $(,)?
        }
    ) => {
        $crate::named!(@build [$(#[$meta])*] $vis $name
            [$( [$(#[$variant_meta])*] $variant [$($text)?] )+]
            [$( [$(#[$wrapper_meta])*] $wrapper $inner )+]);
    };
    (@build [$($meta:tt)*] $vis:vis $name:ident
        [$( [$($variant_meta:tt)*] $variant:ident [$($text:literal)?] )+]
        [$( [$($wrapper_meta:tt)*] $wrapper:ident $inner:ty )*]
    ) => {
        $($meta)*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $($variant_meta)* $variant, )+
            $( $($wrapper_meta)* $wrapper($inner), )*
        }

        impl $name {
            /// Every value of the enum's own, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Every name of the enum's own, in declaration order.
            pub const NAMES: &'static [&'static str] =
                &[$($crate::named!(@text $variant $($text)?)),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $crate::named!(@text $variant $($text)?),)+
                    $($name::$wrapper(inner) => inner.as_str(),)*
                }
            }

            pub fn parse(text: &str) -> Option<$name> {
                let own = Self::ALL.iter().copied().find(|v| v.as_str() == text);
                $(let own = own.or_else(|| <$inner>::parse(text).map($name::$wrapper));)*
                own
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        $(impl From<$inner> for $name {
            fn from(inner: $inner) -> $name {
                $name::$wrapper(inner)
            }
        })*
    };
    (@text $variant:ident) => { stringify!($variant) };
    (@text $variant:ident $text:literal) => { $text };
}

/// Serializes enums declared with [`named!`] (or any type with `as_str` and `parse` and a
/// `NAMES` list) as their names, and reads them back by name.
#[macro_export]
macro_rules! serde_by_name {
    ($($name:ty),+ $(,)?) => {$(
        impl $crate::vocabulary::serde::Serialize for $name {
            fn serialize<S: $crate::vocabulary::serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> $crate::vocabulary::serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::vocabulary::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                $crate::vocabulary::by_name(deserializer, <$name>::NAMES, <$name>::parse)
            }
        }
    )+};
}

#[doc(hidden)]
pub use serde;

/// Reads a name and looks it up; an unknown name gets serde's "unknown variant" message.
#[doc(hidden)]
pub fn by_name<'de, D, T>(
    deserializer: D,
    names: &'static [&'static str],
    parse: fn(&str) -> Option<T>,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Name<T> {
        names: &'static [&'static str],
        parse: fn(&str) -> Option<T>,
    }

    impl<T> serde::de::Visitor<'_> for Name<T> {
        type Value = T;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "one of {}", self.names.join(", "))
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
            (self.parse)(text).ok_or_else(|| E::unknown_variant(text, self.names))
        }
    }

    deserializer.deserialize_str(Name { names, parse })
}

#[cfg(test)]
mod tests {
    crate::named! {
        #[derive(PartialOrd, Ord)]
        enum Sample {
            First,
            Second = "second-one",
        }
    }
    crate::serde_by_name!(Sample);

    crate::named! {
        enum Other {
            Fourth,
        }
    }

    crate::named! {
        enum Wider {
            Third;
            Narrow(Sample),
            Also(Other),
        }
    }

    #[test]
    fn a_wrapper_takes_the_inner_names() {
        assert_eq!(Wider::NAMES, ["Third"]);
        assert_eq!(Other::NAMES, ["Fourth"]);
        assert_eq!(Wider::Narrow(Sample::Second).as_str(), "second-one");
        assert_eq!(Wider::parse("First"), Some(Wider::Narrow(Sample::First)));
        assert_eq!(Wider::parse("Third"), Some(Wider::Third));
        assert_eq!(Wider::parse("Fourth"), Some(Wider::from(Other::Fourth)));
        assert_eq!(Wider::parse("third"), None);
    }

    #[test]
    fn names_come_from_the_declaration() {
        assert_eq!(Sample::NAMES, ["First", "second-one"]);
        assert_eq!(Sample::Second.to_string(), "second-one");
        assert_eq!(Sample::parse("First"), Some(Sample::First));
        assert_eq!(Sample::parse("Second"), None);
        assert_eq!(
            serde_json::to_string(&Sample::ALL).unwrap(),
            r#"["First","second-one"]"#
        );
        let back: Vec<Sample> = serde_json::from_str(r#"["second-one","First"]"#).unwrap();
        assert_eq!(back, [Sample::Second, Sample::First]);
        let unknown = serde_json::from_str::<Sample>(r#""Third""#).unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "unknown variant `Third`, expected `First` or `second-one` at line 1 column 7"
        );
        assert!(serde_json::from_str::<Sample>("1").is_err());
    }
}

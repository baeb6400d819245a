// Field attributes `args!` cannot see: each names its fix.
#![allow(dead_code)]
executa::args! {
    /// The `summarize` tool's arguments.
    pub struct SummarizeArgs {
        /// The text
        pub text: String,
        /// At most this many words
        #[serde(rename = "maxWords")]
        pub max_words: Option<u32>,
        /// The tone
        #[serde(default)]
        pub tone: String,
        /// A field the handler keeps for itself
        #[allow(dead_code)]
        pub internal: u8,
    }
}

fn main() {}

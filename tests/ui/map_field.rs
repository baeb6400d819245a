// A map is not an `args!` type: the hint names the free-form object type.
#![allow(dead_code)]
use std::collections::HashMap;

executa::args! {
    /// The `tag` tool's arguments.
    pub struct TagArgs {
        /// Labels by key
        pub labels: HashMap<String, String>,
    }
}

fn main() {}

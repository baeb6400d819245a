// Enum variants without their wire string, and variants that carry data.
#![allow(dead_code)]
executa::args! {
    /// How fast to ship.
    pub enum Speed { Normal, Express = "express" }

    /// Where to send the result.
    pub enum Target { Inbox = "inbox", Address(String) }
}

fn main() {}

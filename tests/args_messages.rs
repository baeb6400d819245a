//! What `args!` says about the mistakes it cannot accept: each case in `tests/ui/` is a
//! small program that must fail to compile with the message in its `.stderr` file, which
//! names the fix. `TRYBUILD=overwrite cargo test --test args_messages` rewrites the
//! `.stderr` files after a deliberate change of wording (read the diff).

#[test]
fn args_mistakes_name_their_fix() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}

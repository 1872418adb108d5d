//! Explain-a-miss: the exact text for changed, added, removed and reordered
//! parts, the nearest entry, and the compile log.

#[path = "common/capture.rs"]
mod common_capture;

use nitro_cache::{diff_keys, Category, Change, CompileCache, Key, KeyBuilder, Reason};

fn base() -> KeyBuilder {
    KeyBuilder::new().part("experiment", "Mnist")
}

fn compile() -> Result<u8, String> {
    Ok(0)
}

fn cache_with(key: &Key) -> CompileCache<u8> {
    let cache = CompileCache::new();
    cache
        .get_or_compile("train_step", key, None, compile)
        .unwrap();
    cache
}

#[test]
fn changed_parts_print_old_and_new_values() {
    let old = base()
        .graph_const("width", &128usize)
        .input_sig("img", "f32[256,784]")
        .finish()
        .unwrap();
    let new = base()
        .graph_const("width", &256usize)
        .input_sig("img", "f32[200,784]")
        .finish()
        .unwrap();
    let cache = cache_with(&old);
    assert_eq!(
        cache.explain_miss("train_step", &new).to_string(),
        "train_step: graph_const `width` 128 -> 256; input `img` f32[256,784] -> f32[200,784]"
    );
    let (_, outcome) = cache
        .get_or_compile("train_step", &new, None, compile)
        .unwrap();
    assert_eq!(
        outcome.explanation().unwrap().to_string(),
        "train_step: graph_const `width` 128 -> 256; input `img` f32[256,784] -> f32[200,784]"
    );
}

#[test]
fn an_added_part_is_named_with_its_value() {
    let old = base().graph_const("width", &128usize).finish().unwrap();
    let new = base()
        .graph_const("width", &128usize)
        .graph_const("depth", &8u32)
        .finish()
        .unwrap();
    assert_eq!(
        cache_with(&old)
            .explain_miss("train_step", &new)
            .to_string(),
        "train_step: added graph_const `depth` 8"
    );
}

#[test]
fn a_removed_part_is_named_with_its_old_value() {
    let old = base()
        .input_sig("img", "f32[256,784]")
        .input_sig("mask", "bool[256]")
        .finish()
        .unwrap();
    let new = base().input_sig("img", "f32[256,784]").finish().unwrap();
    assert_eq!(
        cache_with(&old)
            .explain_miss("train_step", &new)
            .to_string(),
        "train_step: removed input `mask` bool[256]"
    );
}

#[test]
fn changed_added_and_removed_together_in_order() {
    let old = base()
        .graph_const("width", &128usize)
        .config("optimizer", "adam")
        .env("backend", "cpu")
        .finish()
        .unwrap();
    let new = base()
        .graph_const("width", &64usize)
        .graph_const("classes", &vec![0u8, 1, 2])
        .env("backend", "cpu")
        .finish()
        .unwrap();
    assert_eq!(
        cache_with(&old)
            .explain_miss("train_step", &new)
            .to_string(),
        "train_step: graph_const `width` 128 -> 64; added graph_const `classes` [0, 1, 2]; \
         removed config `optimizer` adam"
    );
}

#[test]
fn a_part_that_changes_category_is_removed_and_added() {
    let old = base().graph_const("smoothing", &0.05f32).finish().unwrap();
    let new = base().input_sig("smoothing", "f32[]").finish().unwrap();
    assert_eq!(
        diff_keys(&old, &new),
        [
            Change::Added {
                category: Category::Input,
                name: "smoothing".into(),
                value: "f32[]".into()
            },
            Change::Removed {
                category: Category::GraphConst,
                name: "smoothing".into(),
                value: "0.05".into()
            },
        ]
    );
}

#[test]
fn reordered_parts_say_so() {
    let old = base()
        .graph_const("a", &1u8)
        .graph_const("b", &2u8)
        .finish()
        .unwrap();
    let new = base()
        .graph_const("b", &2u8)
        .graph_const("a", &1u8)
        .finish()
        .unwrap();
    assert_eq!(
        cache_with(&old)
            .explain_miss("train_step", &new)
            .to_string(),
        "train_step: parts reordered"
    );
}

#[test]
fn the_diff_is_against_the_nearest_entry() {
    let key = |width: usize, depth: u32, batch: usize| {
        base()
            .graph_const("width", &width)
            .graph_const("depth", &depth)
            .input_sig("img", &format!("f32[{batch},784]"))
            .finish()
            .unwrap()
    };
    let cache = CompileCache::new();
    cache
        .get_or_compile("train_step", &key(128, 4, 256), None, compile)
        .unwrap();
    cache
        .get_or_compile("train_step", &key(512, 8, 100), None, compile)
        .unwrap();
    cache
        .get_or_compile("eval_step", &key(128, 8, 256), None, compile)
        .unwrap();
    let explanation = cache.explain_miss("train_step", &key(128, 8, 256));
    assert_eq!(
        explanation.to_string(),
        "train_step: graph_const `depth` 4 -> 8"
    );
    match explanation.reason {
        Reason::Differs { nearest, .. } => assert_eq!(nearest, key(128, 4, 256).to_string()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn first_compile_and_live_keys() {
    let key = base().finish().unwrap();
    let cache: CompileCache<u8> = CompileCache::new();
    assert_eq!(
        cache.explain_miss("train_step", &key).to_string(),
        "train_step: first compile (no live entry of this kind)"
    );
    cache
        .get_or_compile("train_step", &key, None, compile)
        .unwrap();
    assert_eq!(
        cache.explain_miss("train_step", &key).to_string(),
        format!("train_step: key {key} is live (a lookup hits)")
    );
}

#[test]
fn long_values_are_cut() {
    let old = base()
        .graph_const("table", &vec![0u32; 100])
        .finish()
        .unwrap();
    let new = base()
        .graph_const("table", &vec![1u32; 100])
        .finish()
        .unwrap();
    let text = cache_with(&old)
        .explain_miss("train_step", &new)
        .to_string();
    assert!(
        text.starts_with("train_step: graph_const `table` [0, 0, 0"),
        "{text}"
    );
    assert!(text.contains("… -> [1, 1"), "{text}");
    assert!(text.chars().count() < 200, "{text}");
}

#[test]
fn a_miss_is_logged_at_debug_and_every_compile_at_info_with_the_switch() {
    let old = base().graph_const("width", &1usize).finish().unwrap();
    let new = base().graph_const("width", &2usize).finish().unwrap();
    let cache = cache_with(&old);
    let (_, debug_log) = common_capture::capture(tracing::Level::DEBUG, || {
        cache
            .get_or_compile("train_step", &new, None, compile)
            .unwrap();
    });
    assert!(
        debug_log.contains("DEBUG nitro_cache: compiling train_step: graph_const `width` 1 -> 2"),
        "{debug_log}"
    );

    let newer = base().graph_const("width", &3usize).finish().unwrap();
    nitro_cache::set_log_compiles(true);
    let (_, info_log) = common_capture::capture(tracing::Level::INFO, || {
        cache
            .get_or_compile("train_step", &newer, None, compile)
            .unwrap();
        // A hit logs nothing.
        cache
            .get_or_compile("train_step", &newer, None, compile)
            .unwrap();
    });
    nitro_cache::set_log_compiles(false);
    assert!(!nitro_cache::log_compiles());
    let lines: Vec<&str> = info_log.lines().collect();
    assert_eq!(lines.len(), 1, "{info_log}");
    assert!(
        lines[0].contains("INFO nitro_cache: compiling train_step: graph_const `width` 2 -> 3"),
        "{info_log}"
    );
}

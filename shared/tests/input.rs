//! The bounds every reader shares (alias expansion, nesting, repeated keys, non-numbers),
//! tried through each reader: snapshots, `alfredConfig`, `solve` problem files.

use alfred::config::Config;
use alfred::input::MAX_DEPTH;
use alfred::snapshot::Snapshot;
use alfred::solver::file::ProblemDocument;

fn snapshot_error(text: &str) -> String {
    match Snapshot::parse(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

fn config_error(text: &str) -> String {
    match Config::parse(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

fn solve_error(text: &str) -> String {
    match ProblemDocument::parse(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

/// One 1 MB anchored scalar named 5,000 times: a 1 MB file that expands to 5 GB.
fn alias_amplification(key: &str) -> String {
    format!(
        "{key}: &a \"{}\"\nrefs: [{}]\n",
        "x".repeat(1 << 20),
        vec!["*a"; 5000].join(",")
    )
}

#[test]
fn aliases_may_not_expand_a_document_past_its_size() {
    let e = snapshot_error(&format!(
        "apiVersion: v1\nkind: Node\n{}",
        alias_amplification("x")
    ));
    assert!(
        e.contains("aliases expand the document past its own size"),
        "{e}"
    );
    assert!(e.starts_with("document 1: "), "{e}");
    let e = config_error(&alias_amplification("mode"));
    assert!(e.contains("aliases expand"), "{e}");
    let e = solve_error(&alias_amplification("assignment"));
    assert!(e.contains("aliases expand"), "{e}");
    // Aliases within the allowance are read, expanded.
    let small =
        "apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: &l {a: b}, annotations: *l}\n";
    let s = Snapshot::parse(small).unwrap();
    assert_eq!(
        s.nodes[0].metadata.annotations.get("a").map(String::as_str),
        Some("b")
    );
}

#[test]
fn nesting_past_the_bound_is_refused_at_once_in_every_form() {
    let depth = 100_000;
    let flow = format!(
        "apiVersion: v1\nkind: Node\nx: {}{}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let block = format!("apiVersion: v1\nkind: Node\nx:\n{}y\n", "- ".repeat(depth));
    let json = format!(
        r#"{{"apiVersion": "v1", "kind": "Node", "x": {}{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let wanted = format!("nested deeper than {MAX_DEPTH} levels");
    for text in [&flow, &block, &json] {
        let e = snapshot_error(text);
        assert!(e.contains(&wanted), "{e}");
    }
    assert!(
        config_error(&format!("mode: {}{}", "[".repeat(depth), "]".repeat(depth)))
            .contains(&wanted)
    );
    // Deep but within the bound is read.
    let ok = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: n}}\nx: {}{}\n",
        "[".repeat(MAX_DEPTH - 2),
        "]".repeat(MAX_DEPTH - 2)
    );
    assert_eq!(Snapshot::parse(&ok).unwrap().nodes.len(), 1);
}

#[test]
fn a_key_given_twice_is_refused_in_yaml_and_json() {
    let e = snapshot_error("apiVersion: v1\nkind: Node\nkind: Pod\nmetadata: {name: a}\n");
    assert!(e.contains("key `kind` appears twice"), "{e}");
    assert!(e.contains("(line 3, column 1)"), "{e}");
    let e = snapshot_error(
        r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a", "labels": {"x": "1", "x": "2"}}}]}"#,
    );
    assert!(
        e.contains("key `x` appears twice in the object at items[0].metadata.labels"),
        "{e}"
    );
    let e = snapshot_error(r#"{"kind": "List", "kind": "NodeList", "items": []}"#);
    assert!(
        e.contains("key `kind` appears twice in the object at the top level"),
        "{e}"
    );
    // A large object is checked as well as a small one.
    let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\": \"v\"")).collect();
    let e = snapshot_error(&format!(
        r#"{{"apiVersion": "v1", "kind": "Node", "metadata": {{"name": "a", "labels": {{{}, "k7": "again"}}}}}}"#,
        many.join(", ")
    ));
    assert!(e.contains("key `k7` appears twice"), "{e}");
    let e = solve_error("assignment: {h: [t]}\ndimensions: {gpu: {}, gpu: {}}\n");
    assert!(e.contains("key `gpu` appears twice"), "{e}");
    let e = config_error("mode: recommend\nmode: execute\n");
    assert!(e.contains("key `mode` appears twice"), "{e}");
}

#[test]
fn yaml_reads_as_the_api_server_reads_it() {
    // YAML 1.2: `yes` and `0755` are text, as the API server's decoder leaves them.
    let s = Snapshot::parse(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  labels: {a: yes, b: '0755', c: on}\n",
    )
    .unwrap();
    let labels = &s.nodes[0].metadata.labels;
    assert_eq!(labels.get("a").map(String::as_str), Some("yes"));
    assert_eq!(labels.get("b").map(String::as_str), Some("0755"));
    assert_eq!(labels.get("c").map(String::as_str), Some("on"));
    // Documents are numbered across the stream, empty ones included.
    let e = snapshot_error(
        "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Node\nmetadata: {name: b}\n---\nfoo: [1, 2\n",
    );
    assert!(e.starts_with("document 4: not valid YAML"), "{e}");
    assert!(e.contains("line 10"), "{e}");
}

#[test]
fn a_non_number_is_refused_where_a_number_is_read() {
    for limit in [".nan", ".inf", "-.inf"] {
        let e = solve_error(&format!(
            "assignment: {{h: [t]}}\ndimensions: {{gpu: {{objects: {{t: 1}}}}}}\nconstraints:\n  - capacity: {{dimension: gpu, limit: {limit}}}\n"
        ));
        assert!(
            e.contains("not valid YAML") || e.contains("finite"),
            "{limit}: {e}"
        );
    }
}

#[test]
fn a_file_holds_one_config() {
    assert!(config_error("").contains("no document"));
    let e = config_error("mode: recommend\n---\nmode: execute\n");
    assert!(e.contains("2 documents"), "{e}");
}

#[test]
fn a_struct_given_as_a_list_is_refused_at_any_depth() {
    // An InferenceService so shaped costs only itself: it is kept unreadable, with the field.
    let s = Snapshot::parse(
        "apiVersion: ome.io/v1beta1\nkind: InferenceService\nmetadata: {name: a, namespace: b}\nspec:\n  engine:\n    lifecycle:\n      updateStrategy: {type: RecreatePod, rollingUpdate: [1, 2]}\n",
    )
    .unwrap();
    let e = s.unreadable[0].problem();
    assert!(
        e.starts_with(
            "field spec.engine.lifecycle.updateStrategy.rollingUpdate: invalid type: sequence"
        ),
        "{e}"
    );
    let e = snapshot_error("apiVersion: v1\nkind: Node\nmetadata: []\n");
    assert!(
        e.contains("field metadata: not a Kubernetes object: invalid type: sequence"),
        "{e}"
    );
    assert!(config_error("policies: [1]\n").contains("policies: invalid type: sequence"));
    let e = solve_error("assignment: {h: [t]}\nsolver: [10, 5]\n");
    assert!(e.contains("solver: invalid type: sequence"), "{e}");
}

#[test]
fn a_wrong_typed_header_field_is_named() {
    let e = snapshot_error("apiVersion: v1\nkind: {}\nmetadata: {name: a}\n");
    assert!(
        e.starts_with("document 1, field kind: not a Kubernetes object"),
        "{e}"
    );
    let e = snapshot_error(
        "apiVersion: ome.io/v1beta1\nkind: InferenceService\nmetadata: {name: a, namespace: [1]}\n",
    );
    assert!(
        e.contains("field metadata.namespace: not a Kubernetes object"),
        "{e}"
    );
}

/// A file cut short leaves objects no API server holds: one without a name, a pod without a
/// container. Those are errors, not silently smaller objects.
#[test]
fn objects_a_cut_file_leaves_are_refused() {
    let demo = include_str!("../../manifests/examples/demo-cluster.yaml");
    let cut = demo.find("kind: Pod").expect("the demo has pods");
    // The list cut right after the pod's `kind`: its metadata is gone.
    let e = snapshot_error(&demo[..cut + "kind: Pod\n".len()]);
    assert!(
        e.contains("field metadata.name: missing; every object the API server returns has a name"),
        "{e}"
    );
    let e = snapshot_error("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: n}\nspec:\n");
    assert!(
        e.contains("(Pod n/p), field spec.containers: empty;"),
        "{e}"
    );
    let e = snapshot_error(
        "apiVersion: ome.io/v1beta1\nkind: InferenceService\nmetadata: {namespace: n}\n",
    );
    assert!(e.contains("field metadata.name: missing"), "{e}");
}

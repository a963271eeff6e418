//! Node selector terms as Kubernetes matches them (a PersistentVolume's node affinity, a pod's
//! required node affinity): terms are ORed, the requirements of one term ANDed; an empty term
//! list matches nothing, an empty term matches nothing either.

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};

use crate::api::core::Node;

/// True when the node matches one of the selector's terms.
pub fn matches(selector: &NodeSelector, node: &Node) -> bool {
    selector
        .node_selector_terms
        .iter()
        .any(|t| term_matches(t, node))
}

fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_matches(r, node.metadata.label(&r.key)))
        && fields.iter().all(|r| {
            // `metadata.name` is the only field Kubernetes supports here.
            r.key == "metadata.name" && requirement_matches(r, Some(&node.metadata.name))
        })
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), [want]) = (value.and_then(number), values) else {
                return false;
            };
            let Some(want) = number(want) else {
                return false;
            };
            if r.operator == "Gt" {
                have > want
            } else {
                have < want
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels.iter().cloned().collect::<std::collections::BTreeMap<_, _>>()},
        }))
        .unwrap()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn selector(terms: Vec<Vec<NodeSelectorRequirement>>) -> NodeSelector {
        NodeSelector {
            node_selector_terms: terms
                .into_iter()
                .map(|e| NodeSelectorTerm {
                    match_expressions: Some(e),
                    match_fields: None,
                })
                .collect(),
        }
    }

    #[test]
    fn operators() {
        let n = node("a", &[("zone", "z1"), ("gpus", "8")]);
        let one = |r| matches(&selector(vec![vec![r]]), &n);
        assert!(one(req("zone", "In", &["z1", "z2"])));
        assert!(!one(req("zone", "In", &["z2"])));
        assert!(one(req("zone", "NotIn", &["z2"])));
        assert!(
            one(req("rack", "NotIn", &["r1"])),
            "NotIn matches an absent label"
        );
        assert!(one(req("zone", "Exists", &[])));
        assert!(one(req("rack", "DoesNotExist", &[])));
        assert!(one(req("gpus", "Gt", &["4"])) && !one(req("gpus", "Gt", &["8"])));
        assert!(one(req("gpus", "Lt", &["9"])) && !one(req("zone", "Lt", &["9"])));
        assert!(
            !one(req("zone", "Matches", &["z1"])),
            "unknown operators match nothing"
        );
    }

    #[test]
    fn terms_are_ored_and_requirements_anded() {
        let n = node("a", &[("zone", "z1")]);
        let both = selector(vec![vec![
            req("zone", "In", &["z1"]),
            req("rack", "Exists", &[]),
        ]]);
        assert!(!matches(&both, &n));
        let either = selector(vec![
            vec![req("rack", "Exists", &[])],
            vec![req("zone", "In", &["z1"])],
        ]);
        assert!(matches(&either, &n));
        assert!(!matches(&selector(vec![]), &n));
        assert!(!matches(&selector(vec![vec![]]), &n));
        let by_name = NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![req("metadata.name", "In", &["a"])]),
            }],
        };
        assert!(matches(&by_name, &n) && !matches(&by_name, &node("b", &[])));
    }
}

use super::*;

fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn kind(s: &str) -> SelectorErrorKind {
    Selector::parse(s).expect_err(s).kind
}

#[test]
fn parses_every_operator() {
    let s = sel("a=b, c==d ,e!=f,g in (x, y),h notin (z),i,!j");
    assert_eq!(
        s.expressions(),
        &[
            Expression::Equal("a".into(), "b".into()),
            Expression::Equal("c".into(), "d".into()),
            Expression::NotEqual("e".into(), "f".into()),
            Expression::In("g".into(), set(&["x", "y"])),
            Expression::NotIn("h".into(), set(&["z"])),
            Expression::Exists("i".into()),
            Expression::DoesNotExist("j".into()),
        ]
    );
}

#[test]
fn empty_and_blank_select_everything() {
    assert!(sel("").is_everything());
    assert!(sel("   ").is_everything());
    assert!(sel("").matches_labels([]));
}

#[test]
fn prefixed_keys_and_empty_values() {
    let s = sel("app.kubernetes.io/name=web,example.com/x=");
    assert_eq!(s.expressions()[0], Expression::Equal("app.kubernetes.io/name".into(), "web".into()));
    assert_eq!(s.expressions()[1], Expression::Equal("example.com/x".into(), String::new()));
    assert!(s.matches_labels([("app.kubernetes.io/name", "web"), ("example.com/x", "")]));
    assert!(!s.matches_labels([("app.kubernetes.io/name", "web")]));
}

#[test]
fn keywords_are_plain_values() {
    assert_eq!(sel("a=in").expressions()[0], Expression::Equal("a".into(), "in".into()));
    assert_eq!(sel("a in (in,notin)").expressions()[0], Expression::In("a".into(), set(&["in", "notin"])));
    assert!(matches!(kind("in=a"), SelectorErrorKind::Unexpected { .. }));
}

#[test]
fn empty_members_of_sets_are_empty_values() {
    assert_eq!(sel("a in (,x)").expressions()[0], Expression::In("a".into(), set(&["", "x"])));
    assert_eq!(sel("a in (x,)").expressions()[0], Expression::In("a".into(), set(&["", "x"])));
    assert_eq!(sel("a in (,)").expressions()[0], Expression::In("a".into(), set(&[""])));
}

#[test]
fn matching_semantics() {
    let labels = [("app", "web"), ("tier", "front")];
    let yes = ["app", "app=web", "app==web", "app!=db", "zone!=x", "tier in (front,back)", "tier notin (db)"];
    for s in yes.into_iter().chain(["zone notin (a)", "!zone", "app,tier=front"]) {
        assert!(sel(s).matches_labels(labels), "{s} should match");
    }
    let no = ["zone", "app=db", "app!=web", "tier in (db)", "tier notin (front)", "!app", "zone in (a)", "app,zone"];
    for s in no {
        assert!(!sel(s).matches_labels(labels), "{s} should not match");
    }
}

#[test]
fn matches_an_object() {
    let o = Object::from_json(r#"{"metadata":{"name":"a","labels":{"app":"web","env":"prod"}}}"#).unwrap();
    assert!(sel("app=web,env in (prod,staging)").matches(&o));
    assert!(!sel("app=web,env notin (prod)").matches(&o));
    let bare = Object::from_json(r#"{"metadata":{"name":"b"}}"#).unwrap();
    assert!(sel("!app,app!=web,app notin (web)").matches(&bare));
    assert!(!sel("app").matches(&bare));
}

#[test]
fn display_round_trips() {
    for s in ["a=b", "a!=b", "a in (x,y)", "a notin (x)", "a", "!a", "a=b,!c,d in (e)", "x/y="] {
        let parsed = sel(s);
        assert_eq!(parsed.to_string(), s);
        assert_eq!(sel(&parsed.to_string()), parsed);
    }
    assert_eq!(sel("a == b").to_string(), "a=b");
}

#[test]
fn converts_to_kube() {
    use kube::core::SelectorExt;
    let k = sel("app=web,!legacy").to_kube();
    let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
    assert!(k.matches(&labels));
    assert_eq!(k.to_string(), "app=web,!legacy");
}

#[test]
fn serde_uses_the_string_form() {
    let s: Selector = serde_json::from_str(r#""app in (a,b)""#).unwrap();
    assert_eq!(serde_json::to_string(&s).unwrap(), r#""app in (a,b)""#);
    assert!(serde_json::from_str::<Selector>(r#""app in (""#).is_err());
}

#[test]
fn syntax_errors_name_the_token_and_column() {
    let e = Selector::parse("app in (a").unwrap_err();
    assert_eq!(e.column, 10);
    assert_eq!(e.kind, SelectorErrorKind::Unexpected { found: "end of string".into(), expected: "',' or ')'" });
    assert_eq!(
        e.to_string(),
        "invalid label selector \"app in (a\" at column 10: found end of string, expected ',' or ')'"
    );

    assert!(matches!(kind("app in a"), SelectorErrorKind::Unexpected { ref found, .. } if found == "'a'"));
    assert!(matches!(kind("a=b,"), SelectorErrorKind::Unexpected { ref found, .. } if found == "end of string"));
    assert!(matches!(kind(",a"), SelectorErrorKind::Unexpected { ref found, .. } if found == "','"));
    assert!(matches!(kind("a=b c"), SelectorErrorKind::Unexpected { ref found, .. } if found == "'c'"));
    assert!(matches!(kind("!a=b"), SelectorErrorKind::Unexpected { ref found, .. } if found == "'='"));
    assert!(matches!(kind("a=(b)"), SelectorErrorKind::Unexpected { ref found, .. } if found == "'('"));
    assert!(matches!(kind("a in (b c)"), SelectorErrorKind::Unexpected { .. }));
    assert!(matches!(kind("a=b=c"), SelectorErrorKind::Unexpected { .. }));
    assert!(matches!(kind("!"), SelectorErrorKind::Unexpected { .. }));
    assert_eq!(Selector::parse("a=b, c d").unwrap_err().column, 8);
}

#[test]
fn invalid_keys_and_values() {
    assert!(matches!(kind("-a=b"), SelectorErrorKind::InvalidKey { .. }));
    assert!(matches!(kind("a/b/c=d"), SelectorErrorKind::InvalidKey { .. }));
    assert!(matches!(kind("/a=b"), SelectorErrorKind::InvalidKey { .. }));
    assert!(matches!(kind("Example.com/a=b"), SelectorErrorKind::InvalidKey { .. }));
    assert!(matches!(kind(&format!("{}=b", "k".repeat(64))), SelectorErrorKind::InvalidKey { .. }));
    assert!(sel(&format!("{}=b", "k".repeat(63))).expressions().len() == 1);
    assert!(matches!(kind("a=b-"), SelectorErrorKind::InvalidValue { .. }));
    assert!(matches!(kind("a in (ok,bad_)"), SelectorErrorKind::InvalidValue { ref value, .. } if value == "bad_"));
    assert!(matches!(kind(&format!("a={}", "v".repeat(64))), SelectorErrorKind::InvalidValue { .. }));
    let e = Selector::parse("ok=1,a=b-").unwrap_err();
    assert_eq!(e.column, 8);
}

#[test]
fn empty_sets_and_numeric_operators_are_rejected() {
    assert_eq!(kind("a in ()"), SelectorErrorKind::EmptySet { key: "a".into() });
    assert_eq!(kind("a notin ( )"), SelectorErrorKind::EmptySet { key: "a".into() });
    assert_eq!(kind("a>1"), SelectorErrorKind::Unsupported { op: ">".into() });
    assert_eq!(kind("a < 1"), SelectorErrorKind::Unsupported { op: "<".into() });
    assert_eq!(kind("a gt 1"), SelectorErrorKind::Unsupported { op: "gt".into() });
}

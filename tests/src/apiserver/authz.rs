//! Authorization of impersonated requests. A request without
//! `Impersonate-User` is the cluster admin and may do anything; a request
//! impersonating a user is judged against the rules granted to that user
//! with [`ApiServer::grant`] (RBAC's shape: verbs, API groups, resources
//! — `deployments/status` for a subresource —, optionally namespaces and
//! names; `*` matches anything). A user with no matching rule gets the
//! `403 Forbidden` the API server's authorization filter sends, before the
//! body is read or validated. The impersonator's own right to impersonate is
//! not modelled: it always has it.

use super::*;

/// What an impersonated user may do, as an RBAC `PolicyRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    /// `""` for the core group.
    pub api_groups: Vec<String>,
    /// Plurals, or `plural/subresource`.
    pub resources: Vec<String>,
    /// Empty: every namespace (and cluster-scoped resources).
    pub namespaces: Vec<String>,
    /// Empty: every name.
    pub resource_names: Vec<String>,
}

impl Rule {
    /// `verbs` on `resources` of `api_groups`, anywhere.
    pub fn new(verbs: &[&str], api_groups: &[&str], resources: &[&str]) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule { verbs: v(verbs), api_groups: v(api_groups), resources: v(resources), ..Rule::default() }
    }
    /// Restricts the rule to namespace `ns` (a RoleBinding's scope).
    pub fn in_namespace(mut self, ns: &str) -> Rule {
        self.namespaces.push(ns.into());
        self
    }
    /// Restricts the rule to the object named `name`.
    pub fn named(mut self, name: &str) -> Rule {
        self.resource_names.push(name.into());
        self
    }

    fn allows(&self, a: &Attributes<'_>) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        let resource = match a.subresource {
            Some(sub) => format!("{}/{sub}", a.ty.plural),
            None => a.ty.plural.clone(),
        };
        any(&self.verbs, a.verb)
            && any(&self.api_groups, &a.ty.group)
            && any(&self.resources, &resource)
            && (self.namespaces.is_empty() || a.namespace.is_some_and(|ns| any(&self.namespaces, ns)))
            && (self.resource_names.is_empty() || (!a.name.is_empty() && any(&self.resource_names, a.name)))
    }
}

/// What is being asked, as the authorizer's `Attributes`.
pub(super) struct Attributes<'a> {
    pub(super) ty: &'a ResourceType,
    pub(super) verb: &'a str,
    pub(super) namespace: Option<&'a str>,
    pub(super) name: &'a str,
    pub(super) subresource: Option<&'a str>,
}

pub(super) fn authorize(rules: &BTreeMap<String, Vec<Rule>>, user: Option<&str>, a: &Attributes<'_>) -> ApiResult<()> {
    let Some(user) = user else { return Ok(()) };
    if rules.get(user).is_some_and(|rs| rs.iter().any(|r| r.allows(a))) {
        return Ok(());
    }
    Err(ApiError::forbidden(a.ty, a.name, user, a.verb, a.subresource, a.namespace))
}

impl ApiServer {
    /// Grants `rule` to `user`, for requests impersonating it.
    pub fn grant(&self, user: &str, rule: Rule) {
        self.shared.state.lock().users.entry(user.into()).or_default().push(rule);
    }
}

//! Rules: the claim's added in the pod, then the host's rules selecting the link's route tables
//! copied, each one we added journaled; at detach those removed from the pod, and the host's
//! recorded rules replayed on the host.

use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::rule::RuleMessage;

use super::super::journal::Entry;
use super::super::messages::rule_message;
use super::super::{EEXIST, ENOENT, ESRCH, PodNet, RawMessage, StepResult, at, is_errno};
use super::create;
use super::{Attaching, Restoring};
use crate::netns::Rtnl;

/// `rule`, once per rule of the claim.
pub(in super::super) async fn apply(a: &mut Attaching<'_>) -> StepResult<()> {
    for r in &a.cfg.rules {
        a.podnet.step("rule")?;
        let step = format!(
            "rule priority {} from {} to {} table {}",
            r.priority,
            or_all(&r.source),
            or_all(&r.destination),
            r.table
        );
        let msg = rule_message(r).map_err(at(step.clone()))?;
        let raw = RawMessage::new(&RouteNetlinkMessage::NewRule(msg.clone()));
        create(a.podr, RouteNetlinkMessage::NewRule(msg), step).await?;
        a.entry.pod_rules.push(raw);
    }
    Ok(())
}

/// `rule`, once per host rule, after the claim's: an equal one the claim (or another NIC of the
/// pod) made already is not ours to record.
pub(in super::super) async fn copy_host(
    a: &mut Attaching<'_>,
    rules: Vec<RuleMessage>,
) -> StepResult<()> {
    for r in rules {
        a.podnet.step("rule")?;
        let raw = RawMessage::new(&RouteNetlinkMessage::NewRule(r.clone()));
        let step = format!("copy the host's rule {}", raw.summary);
        match a
            .podr
            .request(RouteNetlinkMessage::NewRule(r), NLM_F_CREATE | NLM_F_EXCL)
            .await
        {
            Ok(_) => a.entry.pod_rules.push(raw),
            Err(e) if is_errno(&e, EEXIST) => {}
            Err(e) => return Err(at(step)(e)),
        }
    }
    Ok(())
}

/// `detach:pod-rules`: the rules we added in the pod, removed (one gone already is fine).
pub(in super::super) async fn undo(podnet: &PodNet, podr: &Rtnl, e: &Entry) -> StepResult<()> {
    podnet.step("detach:pod-rules")?;
    for raw in &e.pod_rules {
        if let Ok(RouteNetlinkMessage::NewRule(r)) = raw.decode() {
            match podr.request(RouteNetlinkMessage::DelRule(r), 0).await {
                Ok(_) => {}
                Err(x) if is_errno(&x, ENOENT) || is_errno(&x, ESRCH) => {}
                Err(x) => return Err(at(format!("remove pod {}", raw.summary))(x)),
            }
        }
    }
    Ok(())
}

/// `detach:rule`: the host's recorded rules.
pub(in super::super) async fn restore(podnet: &PodNet, r: &mut Restoring<'_>) -> StepResult<()> {
    podnet.step("detach:rule")?;
    for raw in &r.entry.host.rules {
        r.replay(raw, |m| match m {
            RouteNetlinkMessage::NewRule(rule) => Some(RouteNetlinkMessage::NewRule(rule)),
            _ => None,
        })
        .await;
    }
    Ok(())
}

fn or_all(s: &str) -> &str {
    if s.is_empty() { "all" } else { s }
}

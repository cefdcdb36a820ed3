//! Every model of the built-in catalog (1698, generated from pi 1.6.0's) must reach a wire API
//! this dispatcher implements. Each distinct API is driven once through `run_stream` against a closed
//! port on 127.0.0.1: whatever it fails with (connection refused, missing credentials), it must
//! not be "No API provider registered".

use std::collections::BTreeMap;
use std::time::Duration;

use super::test_support::{request, user};
use super::types::{RequestId, StreamEvent};
use super::{http_agent, run_stream};
use crate::config::registry::builtin_models;

#[test]
fn every_catalog_model_resolves_to_an_implemented_wire_api() {
    let models = builtin_models();
    assert_eq!(models.len(), 1698);
    let mut per_api: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for model in &models {
        per_api
            .entry(model.api.clone())
            .or_default()
            .push(format!("{}/{}", model.provider, model.id));
    }
    let mut missing = Vec::new();
    for (api, ids) in &per_api {
        let mut model = models.iter().find(|m| &m.api == api).unwrap().clone();
        model.base_url = "http://127.0.0.1:1".into();
        let mut r = request(model, vec![user("hi")]);
        r.api_key = "not-a-real-key".into();
        r.idle_timeout = Duration::from_secs(5);
        let (tx, rx) = crossbeam_channel::bounded(64);
        let agent = http_agent(r.idle_timeout);
        std::thread::spawn(move || {
            run_stream(RequestId(1), &r, &tx, agent, &crossbeam_channel::never())
        });
        let unregistered = format!("No API provider registered for api: {api}");
        let mut ended = false;
        while let Ok(event) = rx.recv_timeout(Duration::from_secs(20)) {
            match event.event {
                StreamEvent::Failed(e) if e.message == unregistered => {
                    missing.push(format!("{api} ({} models, e.g. {})", ids.len(), ids[0]));
                    ended = true;
                    break;
                }
                StreamEvent::Failed(_) | StreamEvent::Done { .. } => {
                    ended = true;
                    break;
                }
                _ => {}
            }
        }
        assert!(ended, "{api}: no terminal event");
    }
    assert!(
        missing.is_empty(),
        "catalog models on wire APIs pi-rs does not implement: {}",
        missing.join("; ")
    );
}

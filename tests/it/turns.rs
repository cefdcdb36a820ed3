//! Prompt turns: event sequences and what reaches the provider.

use serde_json::json;

use crate::fake_provider::{FakeProvider, Reply};
use crate::support::{Pi, Setup, event_labels};

#[test]
fn probe() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("anthropic/text.sse")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id":"p1","type":"prompt","message":"Say hello"}));
    let recs = pi.records_until_event("agent_end");
    eprintln!("{:#?}", event_labels(&recs));
    for r in pi.records() { eprintln!("{r}"); }
    eprintln!("{}", serde_json::to_string_pretty(&fake.requests()[0].body).unwrap());
    eprintln!("{:?}", fake.requests()[0].headers);
    fake.finish();
}

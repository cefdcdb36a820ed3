//! The system prompt, laid out as pi lays it out (FACTS §6), in pi-rs's own words.

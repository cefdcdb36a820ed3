//! What surrounds the agent: the system prompt (FACTS §6), context files, skills and prompt
//! templates.

pub mod system_prompt;

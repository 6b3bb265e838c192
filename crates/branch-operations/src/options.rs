//! The option setters `communicate`, `operate` and `ReAct` share, defined
//! once: each option struct names the ones it has (same field names, same
//! meaning) and gets them from [`shared_setters!`].

/// Generates the named shared setters for an option struct.
///
/// ```
/// use branch_operations::{CommunicateOptions, OperateOptions, ReActOptions, Strategy};
/// use std::time::Duration;
///
/// // The same setter, the same meaning, on each verb that has the option.
/// let c = CommunicateOptions::new("q").num_parse_retries(1).repair_backoff(Duration::ZERO, 1.0);
/// let o = OperateOptions::new("q").num_parse_retries(1).action_strategy(Strategy::Sequential);
/// let r = ReActOptions::new("q").action_strategy(Strategy::Sequential).native_tools(true);
/// assert_eq!((c.num_parse_retries, o.num_parse_retries), (1, 1));
/// assert_eq!(o.act.strategy, r.act.strategy);
/// ```
macro_rules! shared_setters {
    ($t:ty: $($setter:ident),* $(,)?) => {
        impl $t {
            $(crate::options::shared_setters!(@one $setter);)*
        }
    };
    (@one chat_model) => {
        /// Uses this chat model for the turn (else the branch's).
        pub fn chat_model(mut self, m: std::sync::Arc<dyn branch_core::model::ChatModel>) -> Self {
            self.chat_model = Some(m);
            self
        }
    };
    (@one parse_model) => {
        /// Sends parse repairs to this model (else the branch's parse model).
        pub fn parse_model(mut self, m: std::sync::Arc<dyn branch_core::model::ChatModel>) -> Self {
            self.parse_model = Some(m);
            self
        }
    };
    (@one skip_validation) => {
        /// Returns the reply unparsed (`Parsed::Unvalidated` in `operate`).
        pub fn skip_validation(mut self, on: bool) -> Self {
            self.skip_validation = on;
            self
        }
    };
    (@one num_parse_retries) => {
        /// Sets the parse repair retries (at most 5).
        pub fn num_parse_retries(mut self, n: usize) -> Self {
            self.num_parse_retries = n;
            self
        }
    };
    (@one on_parse_failure) => {
        /// Sets the parse failure policy (the reference's `handle_validation`).
        pub fn on_parse_failure(mut self, v: crate::parse::OnParseFailure) -> Self {
            self.on_parse_failure = v;
            self
        }
    };
    (@one repair_backoff) => {
        /// Sets the waits between parse repairs (first wait, growth factor).
        pub fn repair_backoff(mut self, first: std::time::Duration, factor: f64) -> Self {
            self.repair_backoff = (first, factor);
            self
        }
    };
    (@one include_token_usage_to_model) => {
        /// Appends the estimated token usage to the request's last message.
        pub fn include_token_usage_to_model(mut self, on: bool) -> Self {
            self.include_token_usage_to_model = on;
            self
        }
    };
    (@one clear_messages) => {
        /// Clears the history (all but the system message) when the turn
        /// is recorded; the request is compiled from the system message
        /// alone.
        pub fn clear_messages(mut self, on: bool) -> Self {
            self.clear_messages = on;
            self
        }
    };
    (@one native_tools) => {
        /// Switches native function calling on (see the `native_tools` field).
        pub fn native_tools(mut self, on: bool) -> Self {
            self.native_tools = on;
            self
        }
    };
    (@one native_format) => {
        /// Switches native structured output on (see the `native_format` field).
        pub fn native_format(mut self, on: bool) -> Self {
            self.native_format = on;
            self
        }
    };
    (@one act_options) => {
        /// Sets how tool calls run.
        pub fn act_options(mut self, a: crate::act::ActOptions) -> Self {
            self.act = a;
            self
        }
    };
    (@one action_strategy) => {
        /// Sets how the requested tool calls run (the reference's
        /// `action_strategy` keyword; `concurrent` by default).
        pub fn action_strategy(mut self, s: crate::act::Strategy) -> Self {
            self.act = self.act.strategy(s);
            self
        }
    };
}
pub(crate) use shared_setters;

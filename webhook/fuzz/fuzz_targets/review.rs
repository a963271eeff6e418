//! Any body, either hook, with and without operator defaults and a runtime: the review answers
//! or errs, never panics, and an answer is always an AdmissionReview with the request's uid.
#![no_main]

use alfred::rollout::strategy::OperatorDefaults;
use alfred_webhook::review::{Context, Hook, review};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let chart = OperatorDefaults::chart();
    let runtime = serde_json::from_value(serde_json::json!({"engineConfig": {"lifecycle": {
        "updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 2}}}}}))
    .ok();
    for (hook, defaults, isvcs) in [
        (Hook::Validate, Some(&chart), false),
        (Hook::Mutate, Some(&chart), true),
        (Hook::Mutate, None, true),
    ] {
        let ctx = Context {
            defaults,
            default_inference_services: isvcs,
        };
        if let Ok(answer) = review(data, hook, &ctx, |_| Ok(runtime.clone())) {
            let out: serde_json::Value =
                serde_json::from_slice(&answer.body).expect("the answer is JSON");
            assert_eq!(out["kind"], "AdmissionReview");
            // The review skips fields it does not read without checking them (libFuzzer found
            // invalid UTF-8 in `resource` admitted), so compare only when the whole body is JSON.
            if let Ok(request) = serde_json::from_slice::<serde_json::Value>(data) {
                assert_eq!(out["response"]["uid"], request["request"]["uid"]);
            }
        }
    }
});

//! Firmware updates through the UpdateService: SimpleUpdate (the BMC fetches the image by
//! URL) or a multipart push of the image itself, each followed to the end of its task.

use serde_json::{Value, json};

use super::RedfishBmc;
use super::parse::{odata_id, text};
use crate::error::BmcResult;

/// How an update reached its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// How the image was handed over (`SimpleUpdate` or `MultipartPush`).
    pub method: &'static str,
    /// The final task (or action) answer's TaskState, when it had one.
    pub task_state: Option<String>,
}

impl RedfishBmc {
    async fn update_service_body(&self, operation: &str) -> BmcResult<(String, Value)> {
        let path = self
            .update_service()
            .ok_or_else(|| self.transport().unsupported(operation, "no UpdateService"))?
            .to_owned();
        let body = self.transport().get(&path).await?.body;
        Ok((path, body))
    }

    /// Whether the BMC offers SimpleUpdate and a multipart push URI.
    pub async fn update_methods(&self) -> BmcResult<(bool, bool)> {
        let (_, service) = self.update_service_body("firmware update").await?;
        Ok((
            service["Actions"]["#UpdateService.SimpleUpdate"]["target"].is_string(),
            service["MultipartHttpPushUri"].is_string(),
        ))
    }

    /// Asks the BMC to fetch `image_uri` and apply it to `targets` (resource paths; empty:
    /// the BMC decides), and follows the task to its end.
    pub async fn simple_update(&self, image_uri: &str, targets: &[String]) -> BmcResult<UpdateOutcome> {
        const OPERATION: &str = "SimpleUpdate";
        let (_, service) = self.update_service_body(OPERATION).await?;
        let action = &service["Actions"]["#UpdateService.SimpleUpdate"];
        let target = text(&action["target"])
            .ok_or_else(|| self.transport().unsupported(OPERATION, "the UpdateService has no SimpleUpdate"))?;
        let mut body = json!({"ImageURI": image_uri});
        let protocol = image_uri.split_once("://").map(|(scheme, _)| scheme.to_uppercase());
        let listed = action["TransferProtocol@Redfish.AllowableValues"].as_array();
        if let (Some(protocol), Some(listed)) = (protocol, listed) {
            if !listed.iter().any(|p| p.as_str() == Some(protocol.as_str())) {
                return Err(self
                    .transport()
                    .unsupported(OPERATION, format!("transfer protocol {protocol} is not allowed")));
            }
            body["TransferProtocol"] = json!(protocol);
        }
        if !targets.is_empty() {
            body["Targets"] = json!(targets);
        }
        let answer = self.transport().post_action(OPERATION, &target, &body).await?;
        Ok(UpdateOutcome { method: "SimpleUpdate", task_state: text(&answer.body["TaskState"]) })
    }

    /// Pushes `image` to the BMC's multipart push URI for `targets`, and follows the task.
    pub async fn push_update(&self, file_name: &str, image: Vec<u8>, targets: &[String]) -> BmcResult<UpdateOutcome> {
        const OPERATION: &str = "multipart firmware push";
        let (_, service) = self.update_service_body(OPERATION).await?;
        let uri = text(&service["MultipartHttpPushUri"])
            .or_else(|| odata_id(&service["MultipartHttpPushUri"]))
            .ok_or_else(|| self.transport().unsupported(OPERATION, "the UpdateService has no MultipartHttpPushUri"))?;
        let parameters = json!({"Targets": targets, "@Redfish.OperationApplyTime": "Immediate"});
        let form = reqwest::multipart::Form::new()
            .part(
                "UpdateParameters",
                reqwest::multipart::Part::text(parameters.to_string())
                    .mime_str("application/json")
                    .map_err(|e| self.transport().protocol(OPERATION, e.to_string()))?,
            )
            .part(
                "UpdateFile",
                reqwest::multipart::Part::bytes(image)
                    .file_name(file_name.to_owned())
                    .mime_str("application/octet-stream")
                    .map_err(|e| self.transport().protocol(OPERATION, e.to_string()))?,
            );
        let answer = self.transport().post_multipart(OPERATION, &uri, form).await?;
        Ok(UpdateOutcome { method: "MultipartPush", task_state: text(&answer.body["TaskState"]) })
    }
}

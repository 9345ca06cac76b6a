//! Firmware updates through the UpdateService: a multipart push of the (already checked)
//! image when the BMC offers one, else SimpleUpdate (the BMC fetches the image by URL); each
//! followed to the end of its task, noting whether the BMC wants a reset to apply it.

use serde_json::{Value, json};

use super::RedfishBmc;
use super::parse::{needs_reset, odata_id, text};
use crate::error::BmcResult;
use crate::model::{FirmwareUpdate, UpdateOutcome, UpdateTarget};

impl RedfishBmc {
    async fn update_service_body(&self, operation: &str) -> BmcResult<Value> {
        let path = self
            .update_service()
            .ok_or_else(|| self.transport().unsupported(operation, "no UpdateService"))?
            .to_owned();
        Ok(self.transport().get(&path).await?.body)
    }

    /// Whether the BMC offers SimpleUpdate and a multipart push URI.
    pub async fn update_methods(&self) -> BmcResult<(bool, bool)> {
        let service = self.update_service_body("firmware update").await?;
        Ok((
            service["Actions"]["#UpdateService.SimpleUpdate"]["target"].is_string(),
            service["MultipartHttpPushUri"].is_string(),
        ))
    }

    /// The resource paths an update target names.
    pub(super) fn update_targets(&self, target: &UpdateTarget) -> BmcResult<Vec<String>> {
        Ok(match target {
            UpdateTarget::System => vec![self.system_path().to_owned()],
            UpdateTarget::Manager => vec![
                self.layout
                    .manager
                    .clone()
                    .ok_or_else(|| self.transport().unsupported("firmware update of the BMC", "no Manager"))?,
            ],
            UpdateTarget::Resources(paths) => paths.clone(),
        })
    }

    /// Hands `update` to the BMC: pushed when it offers a push URI and the image is at
    /// hand, else by URL through SimpleUpdate.
    pub(super) async fn apply_update(&self, update: &FirmwareUpdate) -> BmcResult<UpdateOutcome> {
        let targets = self.update_targets(&update.target)?;
        let (simple, push) = self.update_methods().await?;
        match &update.image {
            Some(image) if push || !simple => self.push_update(&update.file_name, image.clone(), &targets).await,
            _ => self.simple_update(&update.image_url, &targets).await,
        }
    }

    /// Asks the BMC to fetch `image_uri` and apply it to `targets` (resource paths; empty:
    /// the BMC decides), and follows the task to its end.
    pub async fn simple_update(&self, image_uri: &str, targets: &[String]) -> BmcResult<UpdateOutcome> {
        const OPERATION: &str = "SimpleUpdate";
        let service = self.update_service_body(OPERATION).await?;
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
        Ok(outcome("SimpleUpdate", &answer.body))
    }

    /// Pushes `image` to the BMC's multipart push URI for `targets`, and follows the task.
    pub async fn push_update(&self, file_name: &str, image: Vec<u8>, targets: &[String]) -> BmcResult<UpdateOutcome> {
        const OPERATION: &str = "multipart firmware push";
        let service = self.update_service_body(OPERATION).await?;
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
        Ok(outcome("MultipartPush", &answer.body))
    }
}

fn outcome(method: &'static str, answer: &Value) -> UpdateOutcome {
    UpdateOutcome { method, task_state: text(&answer["TaskState"]), reset_required: needs_reset(answer) }
}

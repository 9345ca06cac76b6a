//! `DeployPlan::validate`: a plan that contradicts itself is refused, naming the field.

mod common;

use metal_protocol::{DeployPlan, DigestAlgorithm, ImageFormat};

fn refused(change: impl FnOnce(&mut DeployPlan)) -> &'static str {
    let mut plan = common::deploy_plan();
    change(&mut plan);
    plan.validate().unwrap_err().field
}

#[test]
fn the_sample_plan_is_valid_and_chunk_lengths_add_up() {
    let plan = common::deploy_plan();
    plan.validate().unwrap();
    let m = &plan.chunks;
    let total: u64 = (0..m.sha256.len() as u64).map(|i| m.chunk_len(i)).sum();
    assert_eq!(total, m.raw_size_bytes);
    assert_eq!(m.chunk_len(3), 5);
}

#[test]
fn each_inconsistency_names_its_field() {
    assert_eq!(refused(|p| p.image.url = "ftp://x/y".into()), "image.url");
    assert_eq!(refused(|p| p.image.digest.hex = "AB".repeat(32)), "image.digest.hex");
    assert_eq!(refused(|p| p.image.digest.algorithm = DigestAlgorithm::Sha512), "image.digest.hex");
    assert_eq!(refused(|p| p.chunks.image_digest.hex = "cd".repeat(32)), "chunks.imageDigest");
    assert_eq!(refused(|p| p.chunks.chunk_size = 1000), "chunks.chunkSize");
    assert_eq!(refused(|p| p.chunks.chunk_size = 1024), "chunks.chunkSize");
    assert_eq!(refused(|p| p.chunks.raw_size_bytes = 0), "chunks.rawSizeBytes");
    assert_eq!(
        refused(|p| {
            p.chunks.sha256.pop();
        }),
        "chunks.sha256"
    );
    assert_eq!(refused(|p| p.chunks.sha256[2] = "zz".repeat(32)), "chunks.sha256");
    assert_eq!(refused(|p| p.image.format = ImageFormat::Raw), "image.sizeBytes");
    assert_eq!(
        refused(|p| {
            p.target.min_size_bytes = Some(10);
            p.target.max_size_bytes = Some(9);
        }),
        "target.minSizeBytes"
    );
}

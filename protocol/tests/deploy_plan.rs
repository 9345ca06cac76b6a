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
fn zero_chunks_hold_for_a_short_last_chunk_and_both_lists_may_be_absent() {
    use sha2::Digest as _;
    let mut plan = common::deploy_plan();
    plan.chunks.sha256[3] = hex::encode(sha2::Sha256::digest([0u8; 5]));
    plan.chunks.zero_chunks = vec![1, 3];
    plan.validate().unwrap();
    plan.chunks.zero_chunks.clear();
    plan.image.frames.clear();
    plan.validate().unwrap();
    let json = serde_json::to_value(&plan).unwrap();
    assert!(json["chunks"].get("zeroChunks").is_none() && json["image"].get("frames").is_none(), "{json}");
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
    assert_eq!(
        refused(|p| {
            p.image.format = ImageFormat::Raw;
            p.image.frames.clear();
        }),
        "image.sizeBytes"
    );
    assert_eq!(refused(|p| p.chunks.zero_chunks = vec![0]), "chunks.zeroChunks", "chunk 0 is not zeros");
    assert_eq!(refused(|p| p.chunks.zero_chunks = vec![1, 1]), "chunks.zeroChunks", "a repeat");
    assert_eq!(refused(|p| p.chunks.zero_chunks = vec![4]), "chunks.zeroChunks", "past the end");
    assert_eq!(
        refused(|p| {
            // The short last chunk's zero digest is that of 5 bytes, not of a whole chunk.
            p.chunks.sha256[3] = common::ZERO_MIB_SHA256.into();
            p.chunks.zero_chunks = vec![1, 3];
        }),
        "chunks.zeroChunks"
    );
    assert_eq!(refused(|p| p.image.format = ImageFormat::Xz), "image.frames", "frames of an xz file");
    assert_eq!(
        refused(|p| {
            p.image.frames.pop();
        }),
        "image.frames"
    );
    assert_eq!(refused(|p| p.image.frames[2] = 0), "image.frames");
    assert_eq!(refused(|p| p.image.frames[0] = 123_456 - 60_074), "image.frames", "no room for the seek table");
    assert_eq!(refused(|p| p.image.frames[0] = u64::MAX), "image.frames", "a sum that overflows");
    assert_eq!(
        refused(|p| {
            p.target.min_size_bytes = Some(10);
            p.target.max_size_bytes = Some(9);
        }),
        "target.minSizeBytes"
    );
}

//! Paged lists over real HTTP: `limit` and `cursor` in, the page and a `Link` header out;
//! cursors that hold through inserts, filters the store applies (so a page is a page of
//! matches), and clear refusals of limits and cursors the service did not make.

use crate::api_reservations::{lease, reserve, site_with_nodes};
use crate::common::{Site, error};
use serde_json::{Value, json};

/// GET `path` as admin: the status, the body and the next page's path from `Link`.
async fn page(site: &Site, path: &str) -> (u16, Value, Option<String>) {
    let response = site.http.get(format!("{}{path}", site.url)).bearer_auth(&site.admin).send().await.unwrap();
    let status = response.status().as_u16();
    let link = response.headers().get("link").map(|l| l.to_str().unwrap().to_owned());
    let next = link.map(|l| {
        assert!(l.ends_with(">; rel=\"next\""), "{l}");
        l.trim_start_matches('<').split('>').next().unwrap().to_owned()
    });
    (status, response.json().await.unwrap(), next)
}

fn ids(body: &Value) -> Vec<String> {
    body.as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap().to_owned()).collect()
}

/// Every id of the list at `path`, following links, and the number of pages.
pub(crate) async fn follow(site: &Site, path: &str) -> (Vec<String>, usize) {
    let (mut all, mut pages, mut next) = (Vec::new(), 0, Some(path.to_owned()));
    while let Some(path) = next.take() {
        let (status, body, link) = page(site, &path).await;
        assert_eq!(status, 200, "{path}: {body}");
        all.extend(ids(&body));
        pages += 1;
        next = link;
    }
    (all, pages)
}

#[tokio::test]
async fn node_pages_follow_their_links_through_inserts_and_filters_run_in_the_store() {
    let (site, acme) = site_with_nodes(2, 6).await;
    for i in 0..6 {
        let labels = json!({"rack": "r9", "note": if i % 2 == 0 { "say \"hi\", ok" } else { "Say" }});
        site.admin("POST", "/v1/nodes", Some(json!({"id": format!("x{i}"), "labels": labels}))).await;
    }
    let everything: Vec<String> = {
        let (mut all, pages) = follow(&site, "/v1/nodes").await;
        assert_eq!(pages, 1, "18 nodes fit the default page");
        let sorted = {
            let mut s = all.clone();
            s.sort();
            s
        };
        assert_eq!(all, sorted, "pages go by id");
        all.dedup();
        all
    };
    assert_eq!(everything.len(), 18);

    // Five at a time; nodes inserted before and after the cursor while paging: the ones
    // after it appear once, the ones before it never, and nothing repeats or goes missing.
    let (status, first, next) = page(&site, "/v1/nodes?limit=5").await;
    assert_eq!(status, 200);
    assert_eq!(ids(&first), everything[..5]);
    let next = next.expect("more than five nodes: a next link");
    assert!(next.starts_with("/v1/nodes?limit=5&cursor="), "{next}");
    site.admin("POST", "/v1/nodes", Some(json!({"id": "a-before"}))).await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "zz-after"}))).await;
    let (rest, pages) = follow(&site, &next).await;
    assert_eq!(pages, 3, "14 more at five a page");
    let mut expected: Vec<String> = everything[5..].to_vec();
    expected.push("zz-after".into());
    assert_eq!(rest, expected);

    // Filters are applied by the store: a page of two holds two matches.
    let (_, body, next) = page(&site, "/v1/nodes?label=rack%3Dr1&limit=2").await;
    assert_eq!(ids(&body), ["r1n0", "r1n1"]);
    let (rack, _) = follow(&site, &next.unwrap()).await;
    assert_eq!(rack, ["r1n2", "r1n3", "r1n4", "r1n5"]);
    // Labels match exactly: case, quotes and commas inside a value; every label given.
    let quoted = urlencode("note=say \"hi\", ok");
    let (status, body, _) = page(&site, &format!("/v1/nodes?label={quoted}")).await;
    assert_eq!(status, 422, "a comma splits the selector: {body}");
    let (_, body, _) = page(&site, &format!("/v1/nodes?label={}", urlencode("rack=r9,note=Say"))).await;
    assert_eq!(ids(&body), ["x1", "x3", "x5"]);
    let (_, body, _) = page(&site, &format!("/v1/nodes?label={}", urlencode("note=say"))).await;
    assert_eq!(ids(&body), Vec::<String>::new(), "no prefix or case-insensitive match");
    let (_, body, _) = page(&site, "/v1/nodes?prefix=r1n&limit=3").await;
    assert_eq!(ids(&body), ["r1n0", "r1n1", "r1n2"], "an id prefix, in the store");
    let (_, body, _) = page(&site, "/v1/nodes?prefix=R1").await;
    assert_eq!(body, json!([]), "prefixes match case and all");
    let (_, body, _) = page(&site, "/v1/nodes?pool=p1&state=new").await;
    assert_eq!(ids(&body), Vec::<String>::new());
    let (_, body, _) = page(&site, "/v1/nodes?state=new").await;
    assert_eq!(ids(&body).len(), 8, "the x nodes and the two added: {body}");

    // A tenant's nodes: the ones its reservations hold.
    let (s, reservation) = reserve(&site, &acme, lease(json!({}))).await;
    assert_eq!(s, 201, "{reservation}");
    let held = reservation["nodes"].as_array().unwrap().clone();
    let (_, body, _) = page(&site, "/v1/nodes?tenant=acme").await;
    assert_eq!(body.as_array().unwrap().len(), held.len(), "{body}");
    assert!(held.iter().all(|id| ids(&body).contains(&id.as_str().unwrap().to_owned())), "{body}");
    let (_, body, _) = page(&site, "/v1/nodes?tenant=nobody").await;
    assert_eq!(body, json!([]));
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }
        })
        .collect()
}

#[tokio::test]
async fn reservations_page_newest_first_and_every_list_refuses_what_it_did_not_make() {
    let (site, acme) = site_with_nodes(1, 4).await;
    let mut made = Vec::new();
    for _ in 0..4 {
        let (s, body) = reserve(&site, &acme, lease(json!({}))).await;
        assert_eq!(s, 201, "{body}");
        made.push(body["id"].as_str().unwrap().to_owned());
        site.clock.advance(std::time::Duration::from_secs(60));
    }
    made.reverse();
    let (all, pages) = follow(&site, "/v1/reservations?limit=3").await;
    assert_eq!((all, pages), (made.clone(), 2), "newest first, three a page");
    let (_, body, _) = page(&site, "/v1/reservations?state=cancelled").await;
    assert_eq!(body, json!([]));

    for (path, field) in [
        ("/v1/nodes?limit=0", "limit"),
        ("/v1/hosts?limit=10001", "limit"),
        ("/v1/images?cursor=node-1", "cursor"),
        ("/v1/nodes?label=rack", "label"),
        ("/v1/nodes?label=ra%20ck%3Dr1", "label"),
    ] {
        let (status, body, _) = page(&site, path).await;
        assert_eq!(status, 422, "{path}: {body}");
        error(&body, "INVALID_INPUT");
        assert_eq!(body["error"]["field"], field, "{path}: {body}");
    }
    // A cursor of one collection is not one of another (a reservation's key is its time
    // and id; a node's, its id).
    let (_, _, next) = page(&site, "/v1/reservations?limit=1").await;
    let cursor = next.unwrap().split("cursor=").nth(1).unwrap().to_owned();
    let (status, body, _) = page(&site, &format!("/v1/nodes?cursor={cursor}")).await;
    assert_eq!((status, body["error"]["field"].as_str()), (422, Some("cursor")), "{body}");
}

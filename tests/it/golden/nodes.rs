//! `node list` of a daemon on PostgreSQL (the one store several daemons share).

use crate::golden::{Redactions, home, json, pin_json, pin_text, until};
use crate::support::fresh_postgres;

#[tokio::test]
async fn node_list_as_it_shows_a_daemon_on_postgresql() {
    let Some(url) = fresh_postgres().await else { return };
    let mut home = home();
    home.database_url = Some(url);
    home.start_daemon_with(&["--label", "zone=golden"]);
    until("the daemon to register its node", || {
        json(&home, &["node", "list"]).as_array().is_some_and(|n| n.len() == 1)
    })
    .await;
    let mut redactions = Redactions::new(home.path());
    let node = &json(&home, &["node", "list"])[0];
    let id = node["node"]["id"].as_str().or(node["id"].as_str()).unwrap().to_string();
    redactions.value(id, "[node]");
    if let Some(pid) = home.daemon_pid() {
        redactions.value(pid, "[daemon-pid]");
    }
    pin_text(&home, &redactions, "node_list", &["node", "list"]);
    pin_json(&home, &redactions, "node_list_json", &["node", "list"]);
}

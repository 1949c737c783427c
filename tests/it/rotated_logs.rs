//! `GET /runs/{id}/logs` pages into a rotated log: `?rotation=N` reads `<log>.N` with the same
//! bounds as the live file, and every answer lists the files the log has.

use std::time::Duration;

use serde_json::Value;

use crate::support::TestHome;

const T: Duration = Duration::from_secs(30);
const TOKEN: &str = "rotated-logs-token-0123";

#[tokio::test]
async fn the_logs_route_pages_into_each_rotated_file_and_lists_them() {
    let mut home = TestHome::new();
    // 150 lines of 9 bytes, one at a time, into a 300-byte log kept in 3 files.
    home.workflow(
        "rotating",
        "name: rotating\nstages:\n  - name: t\n    \
         argv: [sh, -c, \"i=100; while [ $i -lt 250 ]; do echo line $i; i=$((i+1)); sleep 0.01; done\"]\n    \
         log_max_size: 300\n    log_max_files: 3\n",
    );
    let addr = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    );
    home.environ.push(("LACHESIS_API_TOKEN".into(), TOKEN.into()));
    home.start_daemon_with(&["--listen", &addr]);
    let id = home.submit(&["--workflow", "rotating"]);
    let (_, stages) = home.wait_settled(id, T).await;
    let log = stages[0].log_path.clone();
    let client = lachesis::http_client::builder().no_proxy().build().unwrap();
    let get = async |query: &str| {
        let url = format!("http://{addr}/runs/{id}/logs?stage=t{query}");
        let answer = client.get(url).bearer_auth(TOKEN).send().await.unwrap();
        (answer.status().as_u16(), answer.text().await.unwrap())
    };
    let page = |text: &str| -> Value { serde_json::from_str::<Value>(text).unwrap()["t"].clone() };
    let file = |n: u32| std::fs::read_to_string(lachesis::logs::rotated(&log, n)).unwrap();

    // The live file, as before, with the list of files.
    let (status, text) = get("").await;
    assert_eq!(status, 200, "{text}");
    let live = page(&text);
    assert_eq!(live["text"], std::fs::read_to_string(&log).unwrap());
    assert_eq!(live["rotation"], 0);
    let sizes: Vec<(u64, u64)> = live["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["rotation"].as_u64().unwrap(), f["size"].as_u64().unwrap()))
        .collect();
    assert_eq!(sizes.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [0, 1, 2], "{live:#}");
    assert!(sizes.iter().all(|(_, size)| *size <= 300), "{sizes:?}");

    // Each rotated file, by bytes and by lines.
    for n in [1, 2] {
        let (status, text) = get(&format!("&rotation={n}&offset=0")).await;
        assert_eq!(status, 200, "{text}");
        let rotated = page(&text);
        assert_eq!(
            (rotated["text"].as_str(), rotated["rotation"].as_u64()),
            (Some(file(n).as_str()), Some(n as u64))
        );
        let (_, text) = get(&format!("&rotation={n}&tail=2")).await;
        let whole = file(n);
        let lines: Vec<&str> = whole.lines().collect();
        let last_two = &lines[lines.len() - 2..];
        assert_eq!(page(&text)["text"].as_str().unwrap().lines().collect::<Vec<_>>(), last_two);
    }
    // The files in order are the newest lines, each once.
    let all = [file(2), file(1), std::fs::read_to_string(&log).unwrap()].concat();
    assert!(
        all.ends_with("line 249\n")
            && (100..250).map(|i| format!("line {i}\n")).collect::<String>().ends_with(&all)
    );

    // A file the log does not have reads as empty, with the list; past the most a log keeps, or
    // not a number, is refused in one line.
    let (status, text) = get("&rotation=7").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        (page(&text)["text"].as_str(), page(&text)["files"].as_array().map(Vec::len)),
        (Some(""), Some(3))
    );
    for bad in ["&rotation=101", "&rotation=x", "&rotation=-1"] {
        let (status, text) = get(bad).await;
        assert_eq!(status, 400, "{bad}: {text}");
        assert!(!text.trim().contains('\n'), "{text}");
    }
    home.kill_daemon();
}

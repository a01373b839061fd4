//! `service-rs sessions`.

use std::process::ExitCode;

use service_supervisor::runtime::SessionRecord;
use service_supervisor::ServiceHome;

pub fn list(home: ServiceHome, json: bool) -> anyhow::Result<ExitCode> {
    print_list(
        &super::runtime(home, false, false, &[])?.list_sessions()?,
        json,
    )
}

/// A table of sessions, or JSON.
pub fn print_list(records: &[SessionRecord], json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(records)?);
        return Ok(ExitCode::SUCCESS);
    }
    if records.is_empty() {
        println!("No sessions yet. Start one with `service-rs run <bundle> --prompt <text>`.");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 5]> = records
        .iter()
        .map(|r| {
            [
                r.id.clone(),
                r.bundle.reference.clone(),
                format!("{:?}", r.status).to_lowercase(),
                r.turn_count.to_string(),
                r.created_at.clone(),
            ]
        })
        .collect();
    print!(
        "{}",
        super::bundles::table(["ID", "BUNDLE", "STATUS", "TURNS", "CREATED"], &rows)
    );
    Ok(ExitCode::SUCCESS)
}

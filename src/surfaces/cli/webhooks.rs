//! `lachesis webhooks`: the outbox's recent deliveries, and a failed one sent again by hand.

use std::process::ExitCode;

use lachesis::model::WebhookDelivery;
use lachesis::service::Service;
use lachesis::settings::Settings;

use super::CliResult;
use super::output::{print_json, table, time};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WebhooksArgs {
    #[command(subcommand)]
    command: Option<WebhooksCommand>,
    /// How many deliveries, newest first
    #[arg(long, default_value_t = lachesis::service::DELIVERIES_SHOWN)]
    limit: i64,
    /// The page after one already shown: its `next_before` (--json)
    #[arg(long)]
    before: Option<i64>,
    /// Print the page as JSON (its `next_before` says where the next one starts)
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum WebhooksCommand {
    /// Send a failed delivery again (same delivery id, a fresh retry window)
    Resend {
        /// The delivery's id, or the start of it
        id: String,
        /// Print the delivery as JSON
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(settings: Settings, args: WebhooksArgs) -> CliResult {
    let service = Service::open(settings).await?;
    match args.command {
        Some(WebhooksCommand::Resend { id, json }) => {
            let delivery = service.resend_webhook(&id).await?;
            match json {
                true => print_json(&delivery)?,
                false => println!(
                    "delivery {} ({} to {}) is pending again",
                    delivery.id, delivery.event, delivery.target
                ),
            }
        }
        None => {
            let page = service.webhook_deliveries(args.limit, args.before).await?;
            if args.json {
                print_json(&page)?;
                return Ok(ExitCode::SUCCESS);
            }
            if page.deliveries.is_empty() {
                println!(
                    "no webhook delivery yet (LACHESIS_WEBHOOKS and schedules' --webhook name the receivers)"
                );
                return Ok(ExitCode::SUCCESS);
            }
            let mut t =
                table(["ID", "STATE", "EVENT", "SUBJECT", "TARGET", "ATTEMPTS", "LAST ANSWER", "UPDATED"]);
            for delivery in &page.deliveries {
                t.add_row(row(delivery));
            }
            println!("{t}");
            if let Some(before) = page.next_before {
                println!("more: lachesis webhooks --before {before}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn row(delivery: &WebhookDelivery) -> [String; 8] {
    let subject = match uuid::Uuid::parse_str(&delivery.subject) {
        Ok(id) => lachesis::model::short_id(&id),
        Err(_) => delivery.subject.clone(),
    };
    [
        delivery.short_id(),
        delivery.state.to_string(),
        delivery.event.clone(),
        subject,
        delivery.target.clone(),
        delivery.attempts.to_string(),
        delivery.last_answer.as_deref().map(lachesis::text::one_line).unwrap_or_else(|| "-".into()),
        time(Some(delivery.updated_at)),
    ]
}

//! Flags `run start` and `run edit` share: `--set`/`--var` assignments and `--needs`.

use std::collections::BTreeMap;

use lachesis::service::ServiceError;

pub(super) fn assignments(
    flag: &'static str,
    items: &[String],
) -> Result<BTreeMap<String, String>, ServiceError> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(ServiceError::BadAssignment { what: flag, text: item.clone() }),
        })
        .collect()
}

/// `--needs POOL=COUNT` values; a pool named twice is refused.
pub(super) fn needs(items: &[String]) -> Result<lachesis::model::Needs, ServiceError> {
    let pairs =
        items.iter().map(|item| lachesis::model::pool::parse_need(item)).collect::<Result<Vec<_>, _>>()?;
    Ok(lachesis::model::Needs::from_pairs(pairs)?)
}

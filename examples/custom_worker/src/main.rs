//! The whole worker binary: the registry and one call. Config comes from `SAVEPOINT_*`
//! variables or `--config FILE` (see the README's configuration section).

fn main() -> std::process::ExitCode {
    savepoint_worker::main_with(|store| {
        let shop = savepoint_demo::EffectLog::new(store);
        let mut registry = savepoint::workflow::Registry::new();
        registry.register(custom_worker::Fulfil::new(shop));
        Ok(registry)
    })
}

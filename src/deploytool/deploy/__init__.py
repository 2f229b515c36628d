"""Deploy a slot's releases: facts -> plan -> execute.

    facts.py     read-only: releases (engine labels), pointers, port, image, cache, cards
    plan.py      pure decisions: plan_up, plan_rollback, plan_prune
    up_checks.py the options of an up and every check that can refuse it (run while planning)
    candidate_plan.py  pure decisions: a tune candidate's plans (launch, stop, the search's end)
    steps.py     the typed steps and the Plan they make up (printed by --dry-run)
    executor.py  the one loop that applies a plan, journals, reports, restores on failure
    step_effects.py  what each step does through the engine when the executor applies it
    reporter.py  how a deploy tells a person what it is doing (the CLI draws progress bars)
    health.py    the health gate
    hooks.py     gateway hooks (pre-stop, post-cutover, post-rollback, on-failure)
    rollout.py   several slots, at most --max-unavailable out of service at a time
    rollout_plan.py  pure decisions: the rollout's request, waves and every slot's up plan
    rollout_journal.py  the last rollout read back from the journal (--resume, --undo)
    watch.py     the supervisor: restart what Docker will not, roll back a crash loop
    commands.py  up, rollback, prune: the three put together, under the slot's lock
    slot_plan.py pure decisions: plan_stop, plan_start, plan_down
    slot_commands.py  stop, start, down (under the slot's lock) and logs
    drain.py     before a serving release stops: wait for the server's own count to reach zero
    cache_commands.py  cache status and wipe (under the slot's lock, refused while a release runs)
    render.py    a release's compose file without an engine (`deploytool render`)
    status.py    what runs where
    doctor.py    is this host ready to build and deploy
    journal_text.py   the journal as a person reads it (`deploytool journal`)
    scrape_targets.py the monitor's scrape targets: what each slot serves, written at every cut-over

Nothing is imported here: `deploytool status` loads status.py alone, not the executor and
the suites it would bring.
"""

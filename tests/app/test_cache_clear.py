"""A visitor who clears Streamlit's caches (the menu's "Clear cache", or the message behind it, which any client can
send) resets nothing the server must keep: the generation slots, the training registry and its run ids, the trained
models and whose they are, the loaded models, the captures and the pages' results. Found with a hostile client: after
one clear, 6 generations ran against a limit of 4 and another visitor's trained models appeared in the victim's
sidebar."""

from __future__ import annotations

import streamlit as st
import tomllib

from gptviz.__main__ import APP_DEFAULT_FLAGS
from gptviz.app import jobs, model_service, services
from tests.support import ROOT
from tests.support.models import build
from tests.support.pagetest import TINY


def clear_every_streamlit_cache() -> None:
    """What Streamlit's clear_cache message does on the server (streamlit.runtime's _handle_clear_cache_request)."""
    st.cache_data.clear()
    st.cache_resource.clear()


def test_the_servers_own_state_survives_a_cache_clear():
    slots, registry, trained = jobs.generation_slots(), jobs.training_registry(), jobs.trained_models()
    model = model_service.load_model(TINY)
    store, captures, results = model_service.model_store(), model_service.capture_store(), services.results_cache()
    taken = [slots.enter(f"visitor {i}") for i in range(slots.limit)]
    try:
        assert all(t.granted for t in taken) and slots.running == slots.limit  # every slot in use
        clear_every_streamlit_cache()
        late = jobs.generation_slots().enter("late visitor")
        assert jobs.generation_slots() is slots and not late.granted  # still full: no fresh slots to hand out
        late.leave()
    finally:
        for ticket in taken:
            ticket.leave()
    assert jobs.training_registry() is registry and jobs.trained_models() is trained
    assert model_service.model_store() is store and model_service.capture_store() is captures
    assert services.results_cache() is results
    assert model_service.load_model(TINY) is model  # not rebuilt beside the copy in use


def test_trained_models_stay_their_owners_after_a_cache_clear():
    trained = jobs.trained_models()
    trained.add("run-owned pre", build(), "alice")
    clear_every_streamlit_cache()
    assert "run-owned pre" in jobs.trained_models().of("alice")
    assert "run-owned pre" not in jobs.trained_models().of("mallory")


def test_visitors_get_no_cache_clearing_menu_or_deploy_button():
    """toolbarMode "viewer" leaves visitors the menu's settings but not "Clear cache" or "Deploy"; `gptviz app`
    passes the same setting when started outside the checkout."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["toolbarMode"] == "viewer"
    assert APP_DEFAULT_FLAGS["--client.toolbarMode"] == "viewer"

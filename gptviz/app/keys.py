"""Every session-state key of the app that is not a setting (figures, buttons, downloads, the app's bookkeeping),
named once; and, re-exported from settings.py, the keys of the settings, so `K.NAME` names every session key.

Pages, the sidebar and the links read keys from here or from settings.py, never as string literals
(tests/app/test_app_structure.py checks the pages), so a key's users can be found with one search and a typo is a
NameError, not a silent new key. A widget key is its session-state key. A setting (a value a visitor picks: its
default, label, link name and rule) is declared in settings.py, not here.
"""

from . import settings as _settings

# the choices settings offer, which pages compare values with
from .settings_choices import (  # noqa: F401
    ATTENTION_VIEWS,
    DEFAULT_PACE,
    GROW_WIRINGS,
    OWN_PAIR,
    PACES,
    PAR_MODEL_IN_USE,
    PATCH_PAIRS,
    SOURCE_BUNDLED,
    SOURCE_PRESET,
    SOURCE_PRETRAINED,
    SOURCE_TRAINED,
    SOURCE_UPLOAD,
    TIMELINE_DETECTORS,
    UNIT_TABS,
    WHY_GRAPH_VIEW,
    WHY_QK_VIEW,
    WHY_VIEWS,
)


def __getattr__(name: str) -> str:
    """A setting's key by its record's name (K.GEN_N == settings.GEN_N.key == "gen_n"): looked up when asked, so a
    typo is still an AttributeError (or an ImportError in `from keys import ...`)."""
    setting = _settings.records().get(name)
    if setting is None:
        raise AttributeError(f"gptviz.app.keys has no key {name!r} (nor a setting of that name in settings.py)")
    return setting.key


# ---- the app's own bookkeeping --------------------------------------------------------------------------------
LINK_READ = "_link_read"  # the session's link has been applied (its first run only)
LINKED_KEYS = "_linked_keys"  # {state key: URL name} of the values a link set
FIGURE_SEQ = "_figure_seq"  # figures drawn so far in this run (numbers their unkeyed download buttons)
GENERATION = "generation"  # this session's live generation: {"spec", "page", "job"}
GENERATION_ERROR = "_generation_error"  # why Generate could not start, shown once under its button
ATT_OPEN_BEST = "_att_open_best"  # an example was loaded: open its most telling head
UNIT_NAV_PENDING = "_unit_nav_pending"  # a unit id was picked: the router opens the unit page (unit_nav)
WHY_NAV_PENDING = "_why_nav_pending"  # a written token's "why?" was picked: the router opens the Why page (unit_nav)
PLOTLY_WARMED = "_plotly_warmed"  # this session's first run sent the script that loads Plotly's bundle


# ---- The sidebar (every page reads these) ----------------------------------------------------------------
HUB_GPT2 = "hub_gpt2"  # the one-click button for GPT-2 small from the Hub
MODEL_RETURN = "model_return"  # the model and view before the Hub click: where "Back to ..." returns
MODEL_BACK = "model_back"  # that button, under the message of a model that failed to load
MODEL_SPEC = "model_spec"
UPLOAD = "upload"  # this session's checked, stored upload (serve.uploads.Upload)
UPLOAD_FILE = "upload_file"  # the uploader, per upload: K.per_item(UPLOAD_FILE, n) (a fresh one after each)
UPLOAD_SEQ = "_upload_seq"  # that n
UPLOAD_ERROR = "_upload_error"  # why the last file was refused, shown once under the uploader
UPLOAD_REMOVE = "upload_remove"  # the button that removes this session's upload
NARROW_ONLY = "gv_narrow_only"  # a container shown only where the sidebar starts closed (display.py's CSS)

# ---- Activations page ------------------------------------------------------------------------------------
ACT_HEADS = "act_heads"
ACT_HEADS_CSV = "act_heads_csv"
ACT_LENS_CSV = "act_lens_csv"
ACT_LENS_HEAT = "act_lens_heat"
ACT_LENS_LINES = "act_lens_lines"
ACT_MLP_HIST = "act_mlp_hist"
ACT_MLP_HIST_CSV = "act_mlp_hist_csv"
ACT_NORM_CSV = "act_norm_csv"
ACT_NORM_STATS = "act_norm_stats"
ACT_NPZ = "act_npz"
ACT_RESID_CSV = "act_resid_csv"
ACT_RESID_HEAT = "act_resid_heat"
ACT_RESID_LINES = "act_resid_lines"
ACT_TOP_NEURONS = "act_top_neurons"
ACT_TOP_NEURONS_CSV = "act_top_neurons_csv"

# ---- Attention page --------------------------------------------------------------------------------------
ATT_DETECTORS = "att_detectors"
ATT_ENTROPY_CHART = "att_entropy_chart"
ATT_EXAMPLE = "att_example"  # per example: K.per_item(ATT_EXAMPLE, i)
ATT_GEN_HEATMAP = "att_gen_heatmap"
ATT_GEN_BARS = "att_gen_bars"
ATT_GEN_MAP = "att_gen_map"
ATT_GEN_MAP_LIVE = "att_gen_map_live"
ATT_GEN_NEXT = "att_gen_next"
ATT_GEN_USE = "att_gen_use"
ATT_GENERATE = "att_generate"
ATT_HEATMAP = "att_heatmap"
ATT_LAYER_GRID = "att_layer_grid"
ATT_LINES_CHART = "att_lines_chart"
ATT_MAP = "att_map"
ATT_MODEL_VIEW = "att_model_view"
ATT_NEURON_CHART = "att_neuron_chart"
ATT_QUERY_BARS = "att_query_bars"
ATT_SPAN_REACH = "att_span_reach"  # the One head view's "to the span" bars
ATT_QUERY_BARS_HTML = "att_query_bars_html"
ATT_QUERY_FOR = "att_query_for"
ATT_QUERY_SPAN = "att_query_span"  # several query tokens picked on the chips: (start, end), its last the chips' value
ATT_CHIP_SPAN = "att_chip_span"  # the chips' span gesture (a drag across them, or a shift-click)
ATT_STEPS_CHART = "att_steps_chart"
ATT_STOP = "att_stop"
ATT_TEXT_CHART = "att_text_chart"
ATT_SPAN = "att_span"  # the span of tokens the text view sums over: (start, end)
ATT_SPAN_VIEW = "att_span_view"  # its component (drag across the tokens)
ATT_VW_RAW = "att_vw_raw"
ATT_VW_WEIGHTED = "att_vw_weighted"
ATT_SHOW_SUGGESTED = "att_show_suggested"  # the button that shows the head worth a look
ATT_GEN_STARTED = "_att_gen_started"  # Generate started the model from the fragment: the page reruns whole

# ---- Embeddings page -------------------------------------------------------------------------------------
EMB_PANELS = "emb_panels"
EMB_PANELS_CSV = "emb_panels_csv"
EMB_PCA = "emb_pca"
EMB_PCA_CSV = "emb_pca_csv"
EMB_POS_SIM = "emb_pos_sim"
EMB_POS_SIM_CSV = "emb_pos_sim_csv"
EMB_TOKEN_SIM = "emb_token_sim"
EMB_TOKEN_SIM_CSV = "emb_token_sim_csv"

# ---- Explainers page -------------------------------------------------------------------------------------
EXP_ACTIVATIONS = "exp_activations"
EXP_ACTIVATIONS_CSV = "exp_activations_csv"
EXP_BLOCK = "exp_block"  # per norm wiring: per_item(EXP_BLOCK, "pre")
EXP_MASK = "exp_mask"
EXP_MASK_CSV = "exp_mask_csv"

# ---- Generation page -------------------------------------------------------------------------------------
GEN_BARS = "gen_bars"
GEN_CURVES = "gen_curves"
GEN_GENERATE = "gen_generate"
GEN_HEATMAP = "gen_heatmap"
GEN_LIVE_MAP = "gen_live_map"
GEN_NEXT = "gen_next"
GEN_STEP_ATTENTION = "gen_step_attention"
GEN_STOP = "gen_stop"
GEN_TABLE = "gen_table"

# ---- Pre-norm vs post-norm page (norms_: same weights; twins_: the trained twins) ------------------------
NORMS_ACT_FIG = "norms_act_fig"
NORMS_ATTN_FIG = "norms_attn_fig"
NORMS_CONFIRMED = "norms_confirmed"
NORMS_GRAD_FIG = "norms_grad_fig"
NORMS_MEASURE = "norms_measure"
NORMS_SWEEP_FIG = "norms_sweep_fig"
NORMS_SWEEP_KEY = "norms_sweep_key"
NORMS_SWEEP_RUN = "norms_sweep_run"
NORMS_TV_FIG = "norms_tv_fig"
TWINS_ATTN_FIG = "twins_attn_fig"
TWINS_DYN_FIG = "twins_dyn_fig"
TWINS_LOSS_FIG = "twins_loss_fig"
TWINS_NEXT_FIG = "twins_next_fig"
TWINS_POS_IDS = "twins_pos_ids"

# ---- Parameters page -------------------------------------------------------------------------------------
PAR_CALC = "par_calc"
PAR_PRESETS_BAR = "par_presets_bar"
PAR_PRESETS_CSV = "par_presets_csv"
PAR_PRESETS_FINER = "par_presets_finer"  # the preset comparison's finer split (an expander, drawn when open)

# ---- Train page ------------------------------------------------------------------------------------------
TRAIN_DL = "train_dl"  # per run and wiring: K.per_item(TRAIN_DL, job id, norm)
TRAIN_DYN_FIG = "train_dyn_fig"
TRAIN_FORM = "train_form"
TRAIN_JOB = "train_job"
TRAIN_JOBS = "train_jobs"
TRAIN_LOSS_FIG = "train_loss_fig"
TRAIN_OPEN = "train_open"  # per run and wiring
TRAIN_SCENARIO = "train_scenario"  # per scenario name
TRAIN_SCENARIO_PICKED = "_train_scenario_picked"  # the scenario the form was last set to
TRAIN_STOP = "train_stop"

# ---- What does this unit do? page -----------------------------------------------------------------------------
UNIT_PILLS = "unit_pills"  # per page and list (per_item): unit ids that open the unit page
UNIT_BUILD = "unit_build"
UNIT_EFFECT = "unit_effect"
UNIT_EXAMPLES = "unit_examples"
UNIT_BANDS = "unit_bands"  # per band of a unit's positive values (per_item): its examples' rows
UNIT_EXPORT = "unit_export"  # per format (per_item): the unit's page as Neuronpedia JSON, as standalone HTML
UNIT_HIST = "unit_hist"
UNIT_HERE_TABLE = "unit_here_table"
UNIT_WORD_TABLE = "unit_word_table"

# ---- Why this token? page --------------------------------------------------------------------------------
WHY_ATT_AFTER = "why_att_after"
WHY_ATT_BEFORE = "why_att_before"
WHY_CLEAN = "why_clean"  # per example pair: K.per_item(WHY_CLEAN, pair name)
WHY_CORRUPT = "why_corrupt"  # per example pair
WHY_DLA_BARS = "why_dla_bars"
WHY_DLA_CSV = "why_dla_csv"
WHY_DLA_GRID = "why_dla_grid"
WHY_FLOW_CSV = "why_flow_csv"
WHY_FLOW_FIG = "why_flow_fig"
WHY_GXI = "why_gxi"
WHY_GRID_CLICKS = "_why_grid_clicks"  # clicks on the heads' grid so far (a fresh grid key after each)
WHY_IG = "why_ig"
WHY_PATCH_HEADS = "why_patch_heads"
WHY_PATCH_RESID = "why_patch_resid"

# ---- the Heads forming page (training timeline) ----------------------------------------------------------------
TL_PLAY = "tl_play"
TL_PLAYED = "_tl_played"  # the step a finished play reached, put on the slider at the next run
TL_HEADS = "tl_heads"  # per wiring (per_item)
TL_FRAME = "tl_frame"  # per wiring and step while playing (per_item)
TL_DETECTOR_CURVES = "tl_detector_curves"
TL_LOSS_CURVES = "tl_loss_curves"
TL_GROW_JOB = "_tl_grow_job"  # this session's "grow an induction head" run id
TL_GROW_START = "tl_grow_start"
TL_GROW_STOP = "tl_grow_stop"
TL_GROW_CURVES = "tl_grow_curves"
TL_GROW_LOSS = "tl_grow_loss"
TL_GROW_HEADS = "tl_grow_heads"  # per wiring (per_item)


# ---- keys made per item ---------------------------------------------------------------------------------------
def per_item(prefix: str, *parts) -> str:
    """A widget key for one of several alike widgets (a run's download button, a norm's block diagram)."""
    return "_".join([prefix, *map(str, parts)])


# the Norms page's reproduction of Xiong et al. and the twins' whole history
NORMS_PAPER_RUN = "norms_paper_run"
NORMS_PAPER_ON = "norms_paper_on"
NORMS_PAPER_FIG = "norms_paper_fig"
NORMS_PAPER_DEPTH_FIG = "norms_paper_depth_fig"
TWINS_HISTORY_FIG = "twins_history_fig"
# the Train page's warmup scenario
TRAIN_WARMUP_RUN = "train_warmup_run"
TRAIN_WARMUP_JOB = "train_warmup_job"
TRAIN_WARMUP_LOSS_FIG = "train_warmup_loss_fig"
TRAIN_WARMUP_GRAD_FIG = "train_warmup_grad_fig"
TRAIN_WARMUP_STOP = "train_warmup_stop"
# the whole model at a glance (Overview page)
OV_CHART = "ov_chart"  # its figure, per layout and per click (per_item): a click's selection starts fresh
OV_CHART_SEQ = "_ov_chart_seq"  # clicks so far (numbers the figure's key)
OV_GO = "_ov_go"  # a box was clicked: the page it opens, at the next run
OV_WIDE = "gv_ov_wide"  # the diagram's containers: left to right on a wide screen, top to bottom on a
OV_TALL = "gv_ov_tall"  # narrow one (display-only CSS picks one)

# the Norms page's first tab: the trained twins side by side
TWINS_SIDE_MAPS = "twins_side_maps"
TWINS_SIDE_NEXT = "twins_side_next"
TWINS_SIDE_WIRING = "twins_side_wiring"
TWINS_SIDE_PAIR = "twins_side_pair"  # the maps' row: a pair on a phone too
TWINS_SIDE_WIRINGS = "twins_side_wirings"

# the Why page's long measurements: started by a click when estimated past a few seconds (issue 43)
WHY_PATCH_RUN = "why_patch_run"
WHY_PATCH_CONFIRMED = "_why_patch_confirmed"  # the pair whose patching the visitor started
WHY_SALIENCY_RUN = "why_saliency_run"
WHY_SALIENCY_CONFIRMED = "_why_saliency_confirmed"

# the Why page's attribution graph and QK decomposition (issue 58)
WHY_GRAPH_FIG = "why_graph_fig"  # per click (per_item): a click's selection starts fresh
WHY_GRAPH_CLICKS = "_why_graph_clicks"  # clicks on the graph so far
WHY_GRAPH_RUN = "why_graph_run"
WHY_GRAPH_CONFIRMED = "_why_graph_confirmed"
WHY_GRAPH_TABLE = "why_graph_table"
WHY_GRAPH_CSV = "why_graph_csv"
WHY_GRAPH_JSON = "why_graph_json"
WHY_GRAPH_REGEN = "why_graph_regen"  # the toggle that regenerates the text without the checked node
WHY_QK_FIG = "why_qk_fig"  # per place it is drawn (per_item)
GEN_WHY = "gen_why"  # the Generation page's "Why this token?" for the step replayed

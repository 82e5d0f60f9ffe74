"""attention page (placeholder until its issue lands)."""
import streamlit as st

st.title("Attention")
st.info("This page is being built.")

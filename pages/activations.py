"""activations page (placeholder until its issue lands)."""
import streamlit as st

st.title("Activations")
st.info("This page is being built.")

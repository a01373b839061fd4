mod bundles;
mod support;

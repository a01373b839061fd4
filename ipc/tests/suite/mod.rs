mod props;
mod wire;

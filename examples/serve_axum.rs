//! How the axum examples serve: on `PORT` (see `service.rs`), with each request's peer
//! address (for `Ip`), once they say they listen.

/// Serves `app` until the process ends.
pub(crate) async fn serve(app: axum::Router) -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", crate::service::port())).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}

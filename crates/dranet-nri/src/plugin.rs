//! The [`NriPlugin`] trait: what an NRI plugin implements.

use std::future::Future;

use crate::adjust::ContainerAdjustment;
use crate::error::HandlerError;
use crate::types::{Container, PodSandbox, RuntimeInfo};

/// Declares default methods of [`NriPlugin`] that ignore their arguments and succeed: most events
/// share that signature, so the no-op is written once.
macro_rules! no_op_hooks {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            $(#[$doc])*
            fn $name(
                &self,
                $($arg: $ty),*
            ) -> impl Future<Output = Result<(), HandlerError>> + Send {
                $(let _ = $arg;)*
                async { Ok(()) }
            }
        )*
    };
}

/// An NRI plugin: one method per runtime event, each a no-op by default.
///
/// Implement the methods for the events you subscribe to (see [`crate::RunnerBuilder::events`]) with
/// plain `async fn`s. Handlers run on their own task and always run to completion, even if the
/// runtime gives up waiting or the connection drops meanwhile, so state they update is never half
/// written. An `Err` ([`HandlerError`]: any error, through `?`) is reported to the runtime as
/// the call's failure with its whole source chain (for `create_container`, the container is not
/// created).
///
/// The same value serves every connection: state kept in it survives runtime restarts.
pub trait NriPlugin: Send + Sync + 'static {
    /// The runtime (re)connected and configured the plugin. Called once per connection.
    fn configure(
        &self,
        runtime: &RuntimeInfo,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = runtime;
        async { Ok(()) }
    }

    /// The runtime's current pods and containers, sent once per connection after `configure`.
    fn synchronize(
        &self,
        pods: &[PodSandbox],
        containers: &[Container],
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = (pods, containers);
        async { Ok(()) }
    }

    /// The runtime is shutting down this plugin's connection; the runner reconnects if allowed.
    fn shutdown(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    no_op_hooks! {
        /// A pod sandbox was created; its network namespace exists and CNI has run.
        fn run_pod_sandbox(pod: &PodSandbox);

        /// A pod sandbox is stopping. `pod.netns_path()` is the path seen at RunPodSandbox when
        /// the runtime sends none (containerd 1.7).
        fn stop_pod_sandbox(pod: &PodSandbox);

        /// A pod sandbox was removed.
        fn remove_pod_sandbox(pod: &PodSandbox);

        /// A pod's resources are being updated (NRI ≥ v0.10 runtimes).
        fn update_pod_sandbox(pod: &PodSandbox);

        /// A pod's resources were updated (NRI ≥ v0.10 runtimes).
        fn post_update_pod_sandbox(pod: &PodSandbox);
    }

    /// A container is about to be created: return the changes to make to it.
    fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> impl Future<Output = Result<ContainerAdjustment, HandlerError>> + Send {
        let _ = (pod, container);
        async { Ok(ContainerAdjustment::new()) }
    }

    no_op_hooks! {
        /// A container was created.
        fn post_create_container(pod: &PodSandbox, container: &Container);

        /// A container is about to start.
        fn start_container(pod: &PodSandbox, container: &Container);

        /// A container started.
        fn post_start_container(pod: &PodSandbox, container: &Container);

        /// A container's resources are about to be updated.
        fn update_container(pod: &PodSandbox, container: &Container);

        /// A container's resources were updated.
        fn post_update_container(pod: &PodSandbox, container: &Container);

        /// A container is stopping.
        fn stop_container(pod: &PodSandbox, container: &Container);

        /// A container was removed.
        fn remove_container(pod: &PodSandbox, container: &Container);
    }
}

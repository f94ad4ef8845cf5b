//! Feature gates known to kube-proxy v1.35 (`--feature-gates=A=true,B=false` and the
//! `featureGates:` map of a KubeProxyConfiguration).
//!
//! kube-proxy applies both with `utilfeature.DefaultMutableFeatureGate.SetFromMap`, which
//! (component-base `featuregate/feature_gate.go`, `unsafeSetFromMap`) rejects a name it does
//! not know ("unrecognized feature gate: X") and a locked gate set to the other value
//! ("cannot set feature gate X to V, feature is locked to D"). Setting a GA or deprecated
//! gate that is not locked only logs a warning. `AllAlpha` / `AllBeta` are the two special
//! gates every component-base feature gate knows; setting them to true turns on every
//! alpha / beta gate that was not set explicitly.
//!
//! # Version targeted: Kubernetes v1.35
//!
//! Each gate's state is the last versioned spec whose `Version` is <= 1.35 (the binary's own
//! version, which is what `SetFromMap` uses unless `--emulated-version` is passed). Gates whose
//! first spec is newer than 1.35 are left out.
//!
//! v1.35 is the newest minor whose complete gate list could be read. v1.36 has been released
//! (the published staging repositories carry v0.36.x tags), and later v1.37 development
//! versions exist too, but no v1.36 version of kubernetes/kubernetes `pkg/features/kube_features.go`
//! or `test/compatibility_lifecycle/reference/versioned_feature_list.yaml` could be found: the
//! kubernetes/kubernetes snapshot (about 1.9 GB) is over the fetch size limit, and the search
//! index holds only v1.35-era and split v1.37-development copies. So a v1.36 table could not be
//! built reliably.
//!
//! # Sources read
//!
//! * Kubernetes-specific gates (marked `// k8s` below): `pkg/features/kube_features.go` from
//!   kubernetes/kubernetes. Since v1.33 this file holds both the constants and
//!   `defaultVersionedKubernetesFeatureGates`; `versioned_kube_features.go` no longer exists.
//!   The copy read is search-index file id 378079260 (102,775 chars). The index does not
//!   give its commit. It is an early v1.36-development version: it already has a few
//!   `"1.36"` specs (VolumeAttributesClass locked, and others), but it still has every gate marked
//!   "remove in 1.36", so no gate known to v1.35.0 had been removed yet. For the
//!   `k8s` rows, only specs with Version <= 1.35 were used. The file also restates the
//!   controller-manager gates (`CloudControllerManagerWebhook`,
//!   `CloudControllerManagerWatchBasedRoutesReconciliation`). It also restates the zpages,
//!   apiextensions and generic-apiserver gates, and those match the staging sources below.
//! * Generic apiserver gates: `pkg/features/kube_features.go` of kubernetes/apiserver at tag
//!   v0.35.7 (commit 8e159d631c6ac7df31e8ddb0dab1f74a981561b9), identical to v0.35.0. Its
//!   `init()` registers them in `DefaultMutableFeatureGate`.
//! * apiextensions gates: `pkg/features/kube_features.go` of kubernetes/apiextensions-apiserver
//!   at v0.35.7 (226e148674c82fbce4e2457c0ca7ed4d81ebe079), identical to v0.35.0. Its `init()`
//!   registers them, and `pkg/features` imports the package.
//! * client-go gates: `features/known_features.go` of kubernetes/client-go at v0.35.7
//!   (d2a9618f5864955e26a30549f82d7f3dbdc914ba), identical to v0.35.0. `pkg/features`'s
//!   `init()` adds them through `clientAdapter`.
//! * component-base at v0.35.7 (bab2adfc14c0b9bdc9d32d2e45620f9909c36e53), identical to v0.35.0:
//!   - `logs/api/v1/kube_features.go`: ContextualLogging, LoggingAlphaOptions and
//!     LoggingBetaOptions. `LoggingStableOptions` is declared there but never registered, so
//!     it is not a known gate.
//!   - `metrics/features/kube_features.go`: registers no gates in 1.35 (`ComponentSLIs` is gone).
//!   - `zpages/features/kube_features.go`: ComponentFlagz and ComponentStatusz.
//!   - `featuregate/feature_gate.go`: AllAlpha and AllBeta.
//!
//!   kube-proxy's `cmd/kube-proxy/app` `init()` calls `metricsfeatures.AddFeatureGates` and
//!   `logsapi.AddFeatureGates` on `utilfeature.DefaultMutableFeatureGate`.
//!
//! # Not verified
//!
//! * The exact kubernetes/kubernetes commit of the `k8s` rows. A gate could have been removed
//!   between the v1.35.0 tag and the copy read, but none of the "remove in 1.36" gates had been.
//! * `StatefulSetSemanticRevisionComparison` (a mitigation with only a `"1.0"` spec) may have
//!   appeared only in a v1.35 patch release rather than in v1.35.0.
//! * A few gates that are GA and not locked, and so accept both values in 1.35:
//!   TopologyManagerPolicyOptions, VolumeAttributesClass (locked from 1.36) and
//!   InformerResourceVersion.
/// A feature gate as the targeted kube-proxy knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    pub name: &'static str,
    /// Its default in the targeted version.
    pub default: bool,
    /// Locked to its default (GA or deprecated with LockToDefault): setting the other value is an error.
    pub locked: bool,
    /// "ALPHA", "BETA", "GA" or "DEPRECATED" in the targeted version.
    pub stage: &'static str,
}

/// Every gate, sorted by name (byte order). The trailing comment names the package
/// that registers the gate.
pub static GATES: &[Gate] = &[
    Gate { name: "APIResponseCompression", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "APIServerIdentity", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "APIServerTracing", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "APIServingWithRoutine", default: false, locked: false, stage: "ALPHA" }, // apiserver
    Gate { name: "AggregatedDiscoveryRemoveBetaType", default: true, locked: true, stage: "DEPRECATED" }, // apiserver
    Gate { name: "AllAlpha", default: false, locked: false, stage: "ALPHA" }, // component-base/featuregate (special)
    Gate { name: "AllBeta", default: false, locked: false, stage: "BETA" }, // component-base/featuregate (special)
    Gate { name: "AllowDNSOnlyNodeCSR", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "AllowInsecureKubeletCertificateSigningRequests", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "AllowOverwriteTerminationGracePeriodSeconds", default: false, locked: true, stage: "DEPRECATED" }, // k8s
    Gate { name: "AllowParsingUserUIDFromCertAuth", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "AllowUnsafeMalformedObjectDeletion", default: false, locked: false, stage: "ALPHA" }, // apiserver
    Gate { name: "AnonymousAuthConfigurableEndpoints", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "AnyVolumeDataSource", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "AuthorizeNodeWithSelectors", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "AuthorizePodWebsocketUpgradeCreatePermission", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "AuthorizeWithSelectors", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "BtreeWatchCache", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "CBORServingAndStorage", default: false, locked: false, stage: "ALPHA" }, // apiserver
    Gate { name: "CPUManagerPolicyAlphaOptions", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "CPUManagerPolicyBetaOptions", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "CPUManagerPolicyOptions", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "CRDObservedGenerationTracking", default: false, locked: false, stage: "BETA" }, // apiextensions-apiserver
    Gate { name: "CRDValidationRatcheting", default: true, locked: true, stage: "GA" }, // apiextensions-apiserver
    Gate { name: "CSIMigrationPortworx", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "CSIServiceAccountTokenSecrets", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "CSIVolumeHealth", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "ChangeContainerStatusOnKubeletRestart", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "ClearingNominatedNodeNameAfterBinding", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ClientsAllowCBOR", default: false, locked: false, stage: "ALPHA" }, // client-go
    Gate { name: "ClientsPreferCBOR", default: false, locked: false, stage: "ALPHA" }, // client-go
    Gate { name: "CloudControllerManagerWatchBasedRoutesReconciliation", default: false, locked: false, stage: "ALPHA" }, // controller-manager (relisted in k8s)
    Gate { name: "CloudControllerManagerWebhook", default: false, locked: false, stage: "ALPHA" }, // controller-manager (relisted in k8s)
    Gate { name: "ClusterTrustBundle", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ClusterTrustBundleProjection", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ComponentFlagz", default: false, locked: false, stage: "ALPHA" }, // component-base/zpages
    Gate { name: "ComponentStatusz", default: false, locked: false, stage: "ALPHA" }, // component-base/zpages
    Gate { name: "ConcurrentWatchObjectDecode", default: false, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "ConsistentListFromCache", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "ConstrainedImpersonation", default: false, locked: false, stage: "ALPHA" }, // apiserver
    Gate { name: "ContainerCheckpoint", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ContainerRestartRules", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ContainerStopSignals", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "ContextualLogging", default: true, locked: false, stage: "BETA" }, // component-base/logs
    Gate { name: "CoordinatedLeaderElection", default: false, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "CrossNamespaceVolumeDataSource", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "CustomCPUCFSQuotaPeriod", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "CustomResourceFieldSelectors", default: true, locked: true, stage: "GA" }, // apiextensions-apiserver
    Gate { name: "DRAAdminAccess", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DRAConsumableCapacity", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "DRADeviceBindingConditions", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "DRADeviceTaintRules", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "DRADeviceTaints", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "DRAExtendedResource", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "DRAPartitionableDevices", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "DRAPrioritizedList", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DRAResourceClaimDeviceStatus", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DRASchedulerFilterTimeout", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DeclarativeValidation", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "DeclarativeValidationTakeover", default: false, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "DeploymentReplicaSetTerminatingReplicas", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DetectCacheInconsistency", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "DisableAllocatorDualWrite", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "DisableCPUQuotaWithExclusiveCPUs", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "DisableNodeKubeProxyVersion", default: true, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "DynamicResourceAllocation", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "EnvFiles", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "EventedPLEG", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "ExecProbeTimeout", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ExternalServiceAccountTokenSigner", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "GangScheduling", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "GenericWorkload", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "GitRepoVolumeDriver", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "GracefulNodeShutdown", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "GracefulNodeShutdownBasedOnPodPriority", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "HPAConfigurableTolerance", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "HPAScaleToZero", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "HonorPVReclaimPolicy", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "HostnameOverride", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ImageMaximumGCAge", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ImageVolume", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ImageVolumeWithDigest", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "InOrderInformers", default: true, locked: false, stage: "BETA" }, // client-go
    Gate { name: "InOrderInformersBatchProcess", default: true, locked: false, stage: "BETA" }, // client-go
    Gate { name: "InPlacePodLevelResourcesVerticalScaling", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "InPlacePodVerticalScaling", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "InPlacePodVerticalScalingAllocatedStatus", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "InPlacePodVerticalScalingExclusiveCPUs", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "InPlacePodVerticalScalingExclusiveMemory", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "InTreePluginPortworxUnregister", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "InformerResourceVersion", default: true, locked: false, stage: "GA" }, // client-go
    Gate { name: "JobBackoffLimitPerIndex", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "JobManagedBy", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "JobPodReplacementPolicy", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "JobSuccessPolicy", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "KMSv1", default: false, locked: false, stage: "DEPRECATED" }, // apiserver
    Gate { name: "KubeletCgroupDriverFromCRI", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "KubeletCrashLoopBackOffMax", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletEnsureSecretPulledImages", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletFineGrainedAuthz", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletInUserNamespace", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "KubeletPSI", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletPodResourcesDynamicResources", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletPodResourcesGet", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletPodResourcesListUseActivePods", default: true, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "KubeletRegistrationGetOnExistsOnly", default: false, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "KubeletSeparateDiskGC", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletServiceAccountTokenForCredentialProviders", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "KubeletTracing", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ListFromCacheSnapshot", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "LocalStorageCapacityIsolationFSQuotaMonitoring", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "LogarithmicScaleDown", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "LoggingAlphaOptions", default: false, locked: false, stage: "ALPHA" }, // component-base/logs
    Gate { name: "LoggingBetaOptions", default: true, locked: false, stage: "BETA" }, // component-base/logs
    Gate { name: "MatchLabelKeysInPodAffinity", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "MatchLabelKeysInPodTopologySpread", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MatchLabelKeysInPodTopologySpreadSelectorMerge", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MaxUnavailableStatefulSet", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MemoryManager", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "MemoryQoS", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "MultiCIDRServiceAllocator", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "MutableCSINodeAllocatableCount", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "MutablePVNodeAffinity", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "MutablePodResourcesForSuspendedJobs", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "MutableSchedulingDirectivesForSuspendedJobs", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "MutatingAdmissionPolicy", default: false, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "NFTablesProxyMode", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "NodeDeclaredFeatures", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "NodeInclusionPolicyInPodTopologySpread", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "NodeLogQuery", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "NodeSwap", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "NominatedNodeNameForExpectation", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "OpenAPIEnums", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "OpportunisticBatching", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "OrderedNamespaceDeletion", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "PodAndContainerStatsFromCRI", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "PodCertificateRequest", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PodDeletionCost", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PodLevelResources", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PodLifecycleSleepAction", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "PodLifecycleSleepActionAllowZero", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "PodLogsQuerySplitStreams", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "PodObservedGenerationTracking", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "PodReadyToStartContainersCondition", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PodSchedulingReadiness", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "PodTopologyLabelsAdmission", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PortForwardWebsockets", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "PreferSameTrafficDistribution", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "PreventStaticPodAPIReferences", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ProcMountType", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "QOSReserved", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "RecoverVolumeExpansionFailure", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "RecursiveReadOnlyMounts", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ReduceDefaultCrashLoopBackOffDecay", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "RelaxedDNSSearchValidation", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "RelaxedEnvironmentVariableValidation", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "RelaxedServiceNameValidation", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "ReloadKubeletServerCertificateFile", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "RemoteRequestHeaderUID", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "ResilientWatchCacheInitialization", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "ResourceHealthStatus", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "RestartAllContainersOnContainerExits", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "RetryGenerateName", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "RotateKubeletServerCertificate", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "RuntimeClassInImageCriApi", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "SELinuxChangePolicy", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "SELinuxMount", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "SELinuxMountReadWriteOncePod", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "SchedulerAsyncAPICalls", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "SchedulerAsyncPreemption", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "SchedulerPopFromBackoffQ", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "SchedulerQueueingHints", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "SeparateCacheWatchRPC", default: false, locked: false, stage: "DEPRECATED" }, // apiserver
    Gate { name: "SeparateTaintEvictionController", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceAccountNodeAudienceRestriction", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "ServiceAccountTokenJTI", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceAccountTokenNodeBinding", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceAccountTokenNodeBindingValidation", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceAccountTokenPodNodeInfo", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "ServiceTrafficDistribution", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "SidecarContainers", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "SizeBasedListCostEstimate", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "StatefulSetSemanticRevisionComparison", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "StorageCapacityScoring", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "StorageNamespaceIndex", default: true, locked: false, stage: "DEPRECATED" }, // k8s
    Gate { name: "StorageVersionAPI", default: false, locked: false, stage: "ALPHA" }, // apiserver
    Gate { name: "StorageVersionHash", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "StorageVersionMigrator", default: false, locked: false, stage: "BETA" }, // k8s
    Gate { name: "StreamingCollectionEncodingToJSON", default: true, locked: true, stage: "GA" }, // k8s+apiserver
    Gate { name: "StreamingCollectionEncodingToProtobuf", default: true, locked: true, stage: "GA" }, // k8s+apiserver
    Gate { name: "StrictIPCIDRValidation", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "StructuredAuthenticationConfiguration", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "StructuredAuthenticationConfigurationEgressSelector", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "StructuredAuthenticationConfigurationJWKSMetrics", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "StructuredAuthorizationConfiguration", default: true, locked: true, stage: "GA" }, // apiserver
    Gate { name: "SupplementalGroupsPolicy", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "SystemdWatchdog", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "TaintTolerationComparisonOperators", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "TokenRequestServiceAccountUIDValidation", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "TopologyAwareHints", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "TopologyManagerPolicyAlphaOptions", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "TopologyManagerPolicyBetaOptions", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "TopologyManagerPolicyOptions", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "TranslateStreamCloseWebsocketRequests", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "UnauthenticatedHTTP2DOSMitigation", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "UnknownVersionInteroperabilityProxy", default: false, locked: false, stage: "ALPHA" }, // apiserver
    Gate { name: "UserNamespacesHostNetworkSupport", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "UserNamespacesSupport", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "VolumeAttributesClass", default: true, locked: false, stage: "GA" }, // k8s
    Gate { name: "VolumeLimitScaling", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "WatchCacheInitializationPostStartHook", default: false, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "WatchFromStorageWithoutResourceVersion", default: false, locked: true, stage: "DEPRECATED" }, // apiserver
    Gate { name: "WatchList", default: true, locked: false, stage: "BETA" }, // apiserver
    Gate { name: "WatchListClient", default: true, locked: false, stage: "BETA" }, // client-go
    Gate { name: "WinDSR", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "WinOverlay", default: true, locked: true, stage: "GA" }, // k8s
    Gate { name: "WindowsCPUAndMemoryAffinity", default: false, locked: false, stage: "ALPHA" }, // k8s
    Gate { name: "WindowsGracefulNodeShutdown", default: true, locked: false, stage: "BETA" }, // k8s
    Gate { name: "WindowsHostNetwork", default: false, locked: false, stage: "DEPRECATED" }, // k8s
];

/// The gates that change what kube-proxy programs or how it syncs (iptables/ipvs/nftables modes,
/// endpoint selection, topology, health checks), with one line each on what they change.
///
/// In v1.35 every one of these is GA and locked to `true`, so setting it to `false` is an
/// error and the behaviour is always on. The health-check code checks no gate in 1.35, because
/// KubeProxyDrainingTerminatingNodes has been removed. `KubeProxyNFTablesLocalhostNodePorts`
/// does not exist. `LoadBalancerIPMode` is no longer a gate in 1.35.
pub static PROXY_GATES: &[(&str, &str)] = &[
    (
        "NFTablesProxyMode",
        "allows `mode: nftables` (validateProxyModeLinux) and makes iptables/ipvs modes and --cleanup remove leftover nftables rules (cmd/kube-proxy/app/server_linux.go)",
    ),
    (
        "PreferSameTrafficDistribution",
        "reads EndpointSlice hints.forNodes (pkg/proxy/endpointslicecache.go) and, when every ready endpoint has a node hint and one names this node, uses only same-node endpoints for Cluster traffic policy (trafficDistribution PreferSameNode; pkg/proxy/topology.go)",
    ),
    (
        "ServiceTrafficDistribution",
        "makes kube-proxy honour zone hints written for spec.trafficDistribution (PreferClose/PreferSameZone); GA since 1.33, the proxy no longer checks it",
    ),
    (
        "TopologyAwareHints",
        "uses EndpointSlice hints.forZones to restrict Cluster-policy endpoints to the node's topology.kubernetes.io/zone when all ready endpoints are hinted (pkg/proxy/topology.go); GA since 1.33, no longer checked",
    ),
    (
        "WinDSR",
        "Windows kernel proxier only: allows enableDSR (direct server return load balancers); an error at startup if disabled",
    ),
    (
        "WinOverlay",
        "Windows kernel proxier only: allows running on an Overlay HNS network; an error at startup if disabled",
    ),
];

/// Checks gates as kube-proxy's `SetFromMap` does: an unknown name, or a locked gate set to
/// the other value, is an error (kube-proxy does not start).
pub fn check(gates: &std::collections::BTreeMap<String, bool>) -> Result<(), String> {
    for (name, value) in gates {
        let gate = match GATES.binary_search_by(|g| g.name.cmp(name.as_str())) {
            Ok(i) => &GATES[i],
            Err(_) => return Err(format!("unrecognized feature gate: {name}")),
        };
        if gate.locked && *value != gate.default {
            return Err(format!("cannot set feature gate {name} to {value}, feature is locked to {}", gate.default));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(name: &str) -> Option<&'static Gate> {
        GATES.iter().find(|g| g.name == name)
    }

    #[test]
    fn check_refuses_unknown_and_locked_gates_as_kube_proxy_does() {
        let m = |pairs: &[(&str, bool)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect::<std::collections::BTreeMap<_, _>>();
        assert_eq!(check(&m(&[("NoSuchGate", true)])), Err("unrecognized feature gate: NoSuchGate".into()));
        assert_eq!(
            check(&m(&[("PreferSameTrafficDistribution", false)])),
            Err("cannot set feature gate PreferSameTrafficDistribution to false, feature is locked to true".into())
        );
        assert_eq!(check(&m(&[("PreferSameTrafficDistribution", true), ("AllAlpha", false)])), Ok(()));
    }

    #[test]
    fn sorted_and_unique() {
        for w in GATES.windows(2) {
            assert!(w[0].name < w[1].name, "{} !< {}", w[0].name, w[1].name);
        }
    }

    #[test]
    fn stages_and_locks_are_consistent() {
        for g in GATES {
            assert!(
                matches!(g.stage, "ALPHA" | "BETA" | "GA" | "DEPRECATED"),
                "{}: {}",
                g.name,
                g.stage
            );
            if g.locked {
                assert!(matches!(g.stage, "GA" | "DEPRECATED"), "{} locked at {}", g.name, g.stage);
            }
            if g.stage == "ALPHA" {
                assert!(!g.default, "{} alpha but on by default", g.name);
            }
        }
    }

    #[test]
    fn known_gates() {
        let nft = find("NFTablesProxyMode").expect("NFTablesProxyMode");
        assert!(nft.default && nft.locked && nft.stage == "GA");
        let psd = find("PreferSameTrafficDistribution").expect("PreferSameTrafficDistribution");
        assert!(psd.default && psd.locked);
        assert!(find("ContextualLogging").is_some());
        assert!(find("LoggingAlphaOptions").is_some());
        assert!(find("ComponentFlagz").is_some());
        assert!(find("AllAlpha").is_some() && find("AllBeta").is_some());
        assert!(find("LoggingStableOptions").is_none());
        assert!(find("KubeProxyNFTablesLocalhostNodePorts").is_none());
        // The internal constant CPUCFSQuotaPeriod is registered under this name.
        assert!(find("CustomCPUCFSQuotaPeriod").is_some());
        assert!(find("CPUCFSQuotaPeriod").is_none());
    }

    #[test]
    fn proxy_gates_are_known() {
        for (name, what) in PROXY_GATES {
            assert!(find(name).is_some(), "{name} not in GATES");
            assert!(!what.is_empty());
        }
    }
}
